"""Is a dataset there? One bounded stat (local) or HEAD-like info call (object storage); nothing is read."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Literal

Reach = Literal["ok", "missing", "unknown"]
DEFAULT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Reachability:
    """`ok`: the URI names something; `missing`: it names nothing; `unknown`: it could not be asked (why)."""

    state: Reach
    why: str = ""


def reach(uri: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> Reachability:
    """Whether `uri` exists, asked once and given at most `timeout_s` seconds to answer."""
    path = _local_path(uri)
    if path is not None:
        return _stat(path)
    answer: list[Reachability] = []
    worker = threading.Thread(target=lambda: answer.append(_info(uri)), name="crossrail-reach", daemon=True)
    worker.start()
    worker.join(timeout_s)
    # A storage client that does not answer is left behind (a daemon thread), never waited for.
    return answer[0] if answer else Reachability("unknown", f"no answer within {timeout_s:g} s")


def _local_path(uri: str) -> str | None:
    if uri.startswith("file://"):
        return uri[len("file://") :]
    return None if "://" in uri else uri


def _stat(path: str) -> Reachability:
    try:
        os.stat(path)
    except FileNotFoundError:
        return Reachability("missing")
    except OSError as exc:
        return Reachability("unknown", exc.strerror or str(exc))
    return Reachability("ok")


def _info(uri: str) -> Reachability:
    try:
        import fsspec

        fs, path = fsspec.core.url_to_fs(uri)
        fs.info(path)
    except FileNotFoundError:
        return Reachability("missing")
    except ImportError as exc:
        return Reachability("unknown", f"no filesystem for this scheme is installed ({_first_line(exc)})")
    except Exception as exc:  # any storage client error means "could not ask", said with its text
        return Reachability("unknown", _first_line(exc))
    return Reachability("ok")


def _first_line(exc: Any) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]
