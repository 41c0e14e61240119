"""The environment an attempt really ran in: its Python and a digest of its installed distributions.

Executors that run the command on a machine as it is (local; Ray without a container) never use
`spec.image`; lineage records this instead, so a run can be traced to what ran it (docs/runtime.md).
"""

from __future__ import annotations

import hashlib
import platform
import sys
from importlib import metadata
from typing import Any


def environment() -> dict[str, Any]:
    """`python` (version), `executable`, `distributions` (how many) and `distributions_digest` (sha256 of the
    sorted `name==version` lines of every installed distribution)."""
    found = sorted({f"{d.metadata['Name']}=={d.version}".lower() for d in metadata.distributions() if d.metadata})
    digest = hashlib.sha256("\n".join(found).encode("utf-8")).hexdigest()
    return {
        "python": platform.python_version(),
        "executable": sys.executable,
        "distributions": len(found),
        "distributions_digest": f"sha256:{digest}",
    }
