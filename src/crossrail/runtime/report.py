"""The reporting channel: training code writes metric, heartbeat, checkpoint and event records; the agent reads them.

Writer and reader live together so the record format (docs/runtime.md) has one home. A local path or
`file://` URI is one JSON-lines file appended a whole line at a time; an `http(s)://` URL is the API's ingest
endpoint, posted batches of numbered records with the attempt's secret (CROSSRAIL_REPORT_SECRET); any other
fsspec URI is a prefix under which numbered chunks `chunk-000001.jsonl`, ... are each written whole, once.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import posixpath
import re
import stat
import sys
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

from crossrail.errors import CrossrailError
from crossrail.runtime.context import RuntimeContext
from crossrail.runtime.storage import filesystem, local_path

RECORD_VERSION = 1
RecordType = Literal["metric", "heartbeat", "checkpoint", "event"]
RECORD_TYPES: tuple[RecordType, ...] = ("metric", "heartbeat", "checkpoint", "event")
NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
ENVELOPE = frozenset({"v", "ts", "run", "attempt", "type"})
INVALID_LINE_CHARS = 500
SECRET_ENV = "CROSSRAIL_REPORT_SECRET"
POST_TRIES = 3  # a batch is posted this many times (backing off from POST_BACKOFF_S) before flush() raises
POST_BACKOFF_S = 0.5
# Bounds on what one writer sends (docs/runtime.md#limits): a record as one compact JSON line without its
# `seq`, and a batch (an HTTP post, a chunk object, one read of the file channel) in records and bytes.
MAX_RECORD_BYTES = 64 * 1024
MAX_BATCH_RECORDS = 1000
MAX_BATCH_BYTES = 4 * 1024 * 1024
INCARNATION_SKEW_S = 300.0
"""An incarnation is its writer's start in ms; the server takes one from the attempt's creation to its own
now, each end widened by this much for clocks that disagree."""


def chunk_name(n: int) -> str:
    return f"chunk-{n:06d}.jsonl"


class _FileSink:
    """Appends each record as one write of one whole line to a local file."""

    def __init__(self, path: str) -> None:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        if size and os.pread(self._fd, 1, size - 1) != b"\n":
            # An earlier writer died mid-line; end that line so the reader reports it and ours stay whole.
            self._write(b"\n")

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def write(self, line: bytes, durable: bool) -> None:
        self._write(line)
        if durable:
            os.fsync(self._fd)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


class _QuietSink:
    """Writes nothing: a data-parallel worker other than rank 0 reports through rank 0."""

    def write(self, line: bytes, durable: bool) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class _ChunkSink:
    """Buffers records and writes them as numbered chunk objects, each whole and never rewritten."""

    def __init__(self, uri: str, clock: Callable[[], float], flush_records: int, flush_s: float) -> None:
        self._fs, self._root = filesystem(uri)
        self._root = self._root.rstrip("/")
        self._clock, self._flush_records, self._flush_s = clock, flush_records, flush_s
        self._buffer: list[bytes] = []
        self._bytes = 0
        self._oldest = 0.0
        self._next: int | None = None

    def write(self, line: bytes, durable: bool) -> None:
        if self._buffer and (len(self._buffer) >= MAX_BATCH_RECORDS or self._bytes + len(line) > MAX_BATCH_BYTES):
            self.flush()  # a chunk stays within what the reader takes in one piece
        if not self._buffer:
            self._oldest = self._clock()
        self._buffer.append(line)
        self._bytes += len(line)
        due = len(self._buffer) >= self._flush_records or self._clock() - self._oldest >= self._flush_s
        if durable or due:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        if self._next is None:
            self._next = self._last_chunk() + 1
        self._fs.pipe_file(f"{self._root}/{chunk_name(self._next)}", b"".join(self._buffer))
        self._next += 1
        self._buffer.clear()
        self._bytes = 0

    def close(self) -> None:
        self.flush()

    def _last_chunk(self) -> int:
        """The highest chunk number already under the prefix, so a restarted writer never rewrites one."""
        try:
            names = [os.path.basename(str(p)) for p in self._fs.ls(self._root, detail=False)]
        except FileNotFoundError:
            return 0
        numbers = [int(n[6:12]) for n in names if n.startswith("chunk-") and n[6:12].isdigit()]
        return max(numbers, default=0)


class _HttpSink:
    """Posts records in batches to the API's `/v1/ingest/{run}/{attempt}` with the attempt's secret.

    Each record gets `seq` (1, 2, ... within this writer) and each batch this writer's `incarnation` (its start
    time in milliseconds, so a restarted writer's is higher); the server stores each (incarnation, seq) once, so
    a batch whose answer was lost is simply posted again. A batch the server did not take stays buffered.
    """

    def __init__(self, url: str, secret: str, clock: Callable[[], float], flush_records: int, flush_s: float) -> None:
        self._url, self._secret = url.rstrip("/"), secret
        self._clock, self._flush_records, self._flush_s = clock, flush_records, flush_s
        self.incarnation = int(clock() * 1000)
        self._seq = 0
        self._buffer: list[dict[str, Any]] = []
        self._bytes = 0
        self._oldest = 0.0

    def write(self, line: bytes, durable: bool) -> None:
        if self._buffer and (len(self._buffer) >= MAX_BATCH_RECORDS or self._bytes + len(line) > MAX_BATCH_BYTES):
            self.flush()  # a batch stays within the server's bounds, whatever flush_records says
        if not self._buffer:
            self._oldest = self._clock()
        self._seq += 1
        self._buffer.append({**json.loads(line), "seq": self._seq})
        self._bytes += len(line)
        due = len(self._buffer) >= self._flush_records or self._clock() - self._oldest >= self._flush_s
        if durable or due:
            self.flush()

    def flush(self) -> None:
        if not self._buffer:
            return
        post_batch(self._url, self._secret, self.incarnation, self._buffer)
        self._buffer = []
        self._bytes = 0

    def close(self) -> None:
        self.flush()


def post_batch(url: str, secret: str, incarnation: int, records: list[dict[str, Any]], tries: int = POST_TRIES) -> Any:
    """POST one batch; the server's answer. Raises OSError when it cannot be delivered (the caller keeps it)."""
    import urllib.error
    import urllib.request

    body = json.dumps({"incarnation": incarnation, "records": records}, allow_nan=False).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {secret}"}
    for attempt in range(tries):
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            if exc.code < 500 or attempt == tries - 1:
                raise OSError(f"{url} refused {len(records)} report records ({exc.code}): {detail}") from None
        except (urllib.error.URLError, TimeoutError) as exc:
            if attempt == tries - 1:
                raise OSError(f"cannot post {len(records)} report records to {url}: {exc}") from None
        time.sleep(POST_BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")


class Reporter:
    """Writes report records for one attempt; thread-safe, usable as a context manager.

    `Reporter(ctx)` reports where the RuntimeContext says; `Reporter(target, run=..., attempt=...)` anywhere.
    Of a data-parallel run's workers only rank 0 reports: `Reporter(ctx)` of any other rank writes nothing.
    """

    def __init__(
        self,
        target: str | RuntimeContext,
        run: str | None = None,
        attempt: int | None = None,
        *,
        clock: Callable[[], float] = time.time,
        flush_records: int = 100,
        flush_s: float = 5.0,
        secret: str | None = None,
    ) -> None:
        quiet = isinstance(target, RuntimeContext) and not target.is_primary
        if isinstance(target, RuntimeContext):
            run, attempt, target = target.run, target.attempt, target.report
        if run is None or attempt is None:
            raise CrossrailError("Reporter needs run and attempt with a target; or pass a RuntimeContext")
        self.target: str = target
        self.run, self.attempt = run, attempt
        self._clock = clock
        self._lock = threading.Lock()
        self._closed = False
        self._sink: _FileSink | _ChunkSink | _HttpSink | _QuietSink
        if quiet:
            self._sink = _QuietSink()
        elif target.startswith(("http://", "https://")):
            secret = secret if secret is not None else os.environ.get(SECRET_ENV, "")
            if not secret:
                raise CrossrailError(f"reporting to {target} needs the attempt's secret in {SECRET_ENV}")
            self._sink = _HttpSink(target, secret, clock, flush_records, flush_s)
        elif (path := local_path(target)) is not None:
            self._sink = _FileSink(path)
        else:
            self._sink = _ChunkSink(target, clock, flush_records, flush_s)

    @property
    def closed(self) -> bool:
        return self._closed

    def metric(self, name: str, value: float, step: int | None = None) -> None:
        self._emit("metric", {"name": name, "value": _value(value), "step": _step(step)})

    def metrics(self, values: Mapping[str, float], step: int | None = None) -> None:
        for name, value in values.items():
            self.metric(name, value, step)

    def heartbeat(self, step: int | None = None) -> None:
        self._emit("heartbeat", {"step": _step(step)})

    def checkpoint(self, step: int, uri: str, **extra: Any) -> None:
        """A committed checkpoint; made durable before returning (fsync, or its chunk written)."""
        clash = ENVELOPE & extra.keys()
        if clash:
            raise CrossrailError(f"checkpoint record fields {sorted(clash)} are reserved; rename them")
        self._emit("checkpoint", {"step": int(step), "uri": uri, **extra}, durable=True)

    def event(self, name: str, **data: Any) -> None:
        self._emit("event", {"name": name, "data": data})

    def runtime(self, framework: str, precision: str) -> None:
        """Which framework runs this attempt and at what precision (`torch`, `bf16`): the `runtime` event metrics
        group runs by (docs/metrics.md#targets)."""
        self.event("runtime", framework=framework, precision=precision)

    def environment(self) -> None:
        """The `environment` event: the Python and installed distributions this attempt runs with, which lineage
        records where no image was used (runtime/environment.py)."""
        from crossrail.runtime.environment import environment

        self.event("environment", **environment())

    def flush(self) -> None:
        with self._lock:
            if not self._closed:
                self._sink.flush()

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._sink.close()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _emit(self, kind: RecordType, fields: dict[str, Any], durable: bool = False) -> None:
        with self._lock:
            if self._closed:
                raise CrossrailError(f"the reporter for {self.target} is closed; records after close() are lost")
            record = {"v": RECORD_VERSION, "ts": self._clock(), "run": self.run, "attempt": self.attempt}
            line = json.dumps({**record, "type": kind, **fields}, separators=(",", ":"), allow_nan=False).encode()
            if len(line) > MAX_RECORD_BYTES:
                raise CrossrailError(
                    f"a {kind} record of {len(line)} bytes is larger than {MAX_RECORD_BYTES} bytes, which the"
                    " channel stores; report a summary, and keep large data in files beside the checkpoint"
                )
            self._sink.write(line + b"\n", durable)


class HeartbeatThread(threading.Thread):
    """Reports a heartbeat at start and every `interval_s` until stopped; `step_fn` gives the current step."""

    def __init__(
        self, reporter: Reporter, interval_s: float = 10.0, step_fn: Callable[[], int | None] | None = None
    ) -> None:
        super().__init__(name="crossrail-heartbeat", daemon=True)
        self.reporter, self.interval_s, self.step_fn = reporter, interval_s, step_fn
        self._stopped = threading.Event()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                self.reporter.heartbeat(self.step_fn() if self.step_fn else None)
            except CrossrailError:
                if self.reporter.closed:
                    return  # the process is shutting down and closed the channel first
                raise
            except OSError as exc:  # a storage blip must not end heartbeats for the rest of the run
                print(f"crossrail: heartbeat not written ({exc}); trying again in {self.interval_s} s", file=sys.stderr)
            self._stopped.wait(self.interval_s)

    def stop(self, timeout_s: float | None = None) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout_s)
        # A last beat with the step reached: useful progress is measured up to an attempt's last report.
        if not self.reporter.closed and self.step_fn is not None:
            with contextlib.suppress(CrossrailError, OSError):  # the channel closed under it: the attempt ends
                self.reporter.heartbeat(self.step_fn())


def _value(value: float) -> float | str:
    number = float(value)
    if math.isfinite(number):
        return number
    return "nan" if math.isnan(number) else ("inf" if number > 0 else "-inf")


def _step(step: int | None) -> int | None:
    return None if step is None else int(step)


# ---- reading -------------------------------------------------------------------------------------------


PARTS_DIR = "parts"
"""Under an attempt's report location, `parts/<part>/<replica>` is where each replica of a pipeline's part reports
(replica_report), so no two pods write one object."""
MERGED_CURSOR = "m1"
CURSOR_CHARS = 64
"""A cursor is stored in the attempt's `report_cursor` column, a String(64)."""
REPLICAS_READ = {"chunks": 8, "file": 4}
"""The replicas of one part read back, by index: what a cursor of CURSOR_CHARS holds with each position in base 36
(a replica's chunks up to 36**4, about 1.7 million; a replica's file up to 36**6 bytes, about 2 GB)."""
_PART_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KEY_CHARS = 12
"""A part name longer than this is keyed in the cursor by `~` and a hash of it."""


def replica_report(report: str, part: str, replica: int | str) -> str:
    """Where replica `replica` of part `part` reports: `<report>/parts/<part>/<replica>` under the attempt's (or, for
    `crossrail render`, the run's) report location, which read_new of `report` reads with the others. `replica` may
    be `$(CROSSRAIL_PART_REPLICA)`, which the kubelet expands in a pod's env. An HTTP ingest endpoint is unchanged:
    the API server keeps records per writer (docs/api.md#ingest)."""
    if report.startswith(("http://", "https://")):
        return report
    return f"{report.rstrip('/')}/{PARTS_DIR}/{part}/{replica}"


def read_new(target: str, cursor: str | None) -> tuple[list[dict[str, Any]], str]:
    """The complete records written to `target` after `cursor`, and the cursor to pass next time.

    Lines that are not valid records come back as `{"type": "invalid", "line", "reason", "where"}`;
    content never raises. A target that does not exist yet gives no records and the cursor unchanged.

    The replicas of a pipeline's part report under `target` (replica_report): their records are read with the
    target's own and merged, oldest first, as the local executor's replicas share one file. Each carries `part` and
    `replica`; a heartbeat of a replica other than 0 keeps its time (the part is alive) but not its step, so the
    part's progress is its first replica's. A part's first REPLICAS_READ replicas are read; one `invalid` record
    says so the first time another one is found. The cursor is then `m1:<own>;<part>=<replica 0>,<replica 1>,...`
    (positions in base 36, `!` at its end once that was said), within CURSOR_CHARS.
    """
    if target.startswith(("http://", "https://")):
        raise CrossrailError(
            f"{target} is the API server's ingest endpoint: it stores records as they are posted, nothing reads"
            " them back from there; `crossrail events --run RUN` lists what was stored"
        )
    own, replicas, warned = _cursors(cursor)
    records, own_after = _read_one(target, own)
    if not replicas and (records or own_after != 0):
        return records, str(own_after)  # an attempt's own channel: no replicas to look for
    found = _replicas(target)
    if not found and not replicas:
        return records, str(own_after)
    cap = REPLICAS_READ["file" if local_path(target) is not None else "chunks"]
    keys = {_key(part): part for part, _ in found}
    positions = {(keys.get(k, k), i): at for (k, i), at in replicas.items()}
    beyond = sorted(key for key in found if key[1] >= cap)
    positions |= {key: 0 for key in sorted(found) if key[1] < cap and key not in positions}
    merged = list(records)
    for (part, replica), at in sorted(positions.items()):
        if len(merged) >= MAX_BATCH_RECORDS:
            break  # the other replicas' records next time
        got, positions[part, replica] = _read_one(replica_report(target, part, replica), at)
        merged += [_from_replica(r, part, replica) for r in got]
    merged.sort(key=lambda r: float(r.get("ts", 0.0)))  # stable: each replica's records stay in order
    if beyond and not warned:
        names = ", ".join(f"{PARTS_DIR}/{part}/{replica}" for part, replica in beyond)
        reason = f"only the first {cap} replicas of a part are read back (the store keeps a {CURSOR_CHARS}-character"
        reason += " cursor); run fewer replicas of the part, or report over HTTP (agent --report-url)"
        merged.append(_invalid(names, reason, names))
    return merged, _merged_cursor(own_after, positions, warned or bool(beyond))


def _read_one(target: str, at: int) -> tuple[list[dict[str, Any]], int]:
    """One channel's records after position `at` (a byte offset in a file, a count of chunks), and the next."""
    path = local_path(target)
    if path is not None and os.path.isdir(path):
        return [], at  # its replicas' directory (`parts/`), where nothing writes a report of its own
    records, after = _read_file(path, at) if path is not None else _read_chunks(target, at)
    return records, int(after)


def _replicas(target: str) -> set[tuple[str, int]]:
    """(part, replica) of every replica that has reported under `target` (`parts/<part>/<replica>`)."""
    path = local_path(target)
    try:
        if path is not None:
            root = os.path.join(path, PARTS_DIR)
            if not os.path.isdir(root):
                return set()
            parts = {name: os.listdir(os.path.join(root, name)) for name in os.listdir(root)}
        else:
            fs, base = filesystem(target)
            root = f"{base.rstrip('/')}/{PARTS_DIR}"
            names = [posixpath.basename(str(p).rstrip("/")) for p in fs.ls(root, detail=False)]
            parts = {
                name: [posixpath.basename(str(p).rstrip("/")) for p in fs.ls(f"{root}/{name}", detail=False)]
                for name in names
            }
    except (FileNotFoundError, NotADirectoryError):
        return set()
    return {
        (part, int(replica))
        for part, replicas in parts.items()
        if _PART_NAME.match(part)
        for replica in replicas
        if replica.isdigit()
    }


def _from_replica(record: dict[str, Any], part: str, replica: int) -> dict[str, Any]:
    if record.get("type") == "invalid":
        return {**record, "where": f"{PARTS_DIR}/{part}/{replica} {record.get('where', '')}".rstrip()}
    out = {**record, "part": part, "replica": replica}
    if record.get("type") == "heartbeat" and replica != 0:
        out["step"] = None  # the part's progress is its first replica's
    return out


def _key(part: str) -> str:
    """A part's key in a cursor: its name, or `~` and five base-36 digits of its CRC-32 for a long name."""
    if len(part) <= _KEY_CHARS:
        return part
    return "~" + _base36(zlib.crc32(part.encode()) % 36**5).rjust(5, "0")


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, digit = divmod(n, 36)
        out = digits[digit] + out
        if n == 0:
            return out


def _merged_cursor(own: int, positions: dict[tuple[str, int], int], warned: bool) -> str:
    by_part: dict[str, dict[int, int]] = {}
    for (part, replica), at in positions.items():
        by_part.setdefault(part, {})[replica] = at
    text = f"{MERGED_CURSOR}:{_base36(own)}"
    for part, counts in sorted(by_part.items()):
        text += f";{_key(part)}=" + ",".join(_base36(counts.get(i, 0)) for i in range(max(counts) + 1))
    text += "!" if warned else ""
    if len(text) > CURSOR_CHARS:  # past REPLICAS_READ's bounds: months of chunks, gigabytes of a file
        raise CrossrailError(
            f"the report cursor {text!r} is longer than the {CURSOR_CHARS} characters the store keeps: a replica "
            "wrote more than its report channel can track; start the part again as a new attempt"
        )
    return text


def _cursors(cursor: str | None) -> tuple[int, dict[tuple[str, int], int], bool]:
    """(the position in the target's own channel, each replica's by (part key, replica), whether replicas past
    REPLICAS_READ were reported) of a cursor read_new returned."""
    if cursor is None or not cursor.startswith(f"{MERGED_CURSOR}:"):
        return _cursor(cursor), {}, False
    body = cursor.removeprefix(f"{MERGED_CURSOR}:")
    warned = body.endswith("!")
    own, *parts = body.removesuffix("!").split(";")
    replicas: dict[tuple[str, int], int] = {}
    try:
        for item in parts:
            key, _, counts = item.partition("=")
            if not (_PART_NAME.match(key) or re.fullmatch(r"~[0-9a-z]{5}", key)):
                raise ValueError(key)
            replicas |= {(key, i): int(c, 36) for i, c in enumerate(counts.split(","))}
        return int(own, 36), replicas, warned
    except ValueError:
        raise CrossrailError(
            f"report cursor {cursor!r} was not returned by read_new; pass None to read from the start"
        ) from None


def _cursor(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not cursor.isdigit():
        raise CrossrailError(f"report cursor {cursor!r} was not returned by read_new; pass None to read from the start")
    return int(cursor)


def _read_file(path: str, offset: int) -> tuple[list[dict[str, Any]], str]:
    """Whole lines from byte `offset`, at most MAX_BATCH_BYTES of them a call; a trailing line without its
    newline is left for the next call, and a line longer than a batch is skipped as one `invalid` record."""
    try:
        # O_NONBLOCK and the fstat: a report replaced by a FIFO or a device is not read (nor waited on).
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return [], str(offset)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [], str(offset)  # its heartbeats stop, and the attempt is lost as any silent one is
        f.seek(offset)
        data = f.read(MAX_BATCH_BYTES)
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == MAX_BATCH_BYTES:
            return _skip_long_line(f, data, offset)
    records, start = [], 0
    while start < end:
        stop = data.index(b"\n", start)
        records.append(parse_line(data[start:stop], f"byte {offset + start}"))
        start = stop + 1
    return records, str(offset + end)


def _skip_long_line(f: Any, head: bytes, offset: int) -> tuple[list[dict[str, Any]], str]:
    """The line at `offset` is longer than a batch: one `invalid` record once its newline is written."""
    where = offset + len(head)
    while block := f.read(MAX_BATCH_BYTES):
        newline = block.find(b"\n")
        if newline >= 0:
            size = where + newline - offset
            return [_too_long(head, f"a record of {size} bytes", f"byte {offset}")], str(where + newline + 1)
        where += len(block)
    return [], str(offset)  # still being written: read it again once it ends


def _too_long(raw: bytes, what: str, where: str) -> dict[str, Any]:
    text = raw[: INVALID_LINE_CHARS * 4].decode("utf-8", errors="replace")
    return _invalid(text, f"{what}; a record is at most {MAX_RECORD_BYTES} bytes", where)


def _read_chunks(target: str, consumed: int) -> tuple[list[dict[str, Any]], str]:
    """The chunks after the first `consumed`, in order, up to the first one not written yet or about
    MAX_BATCH_BYTES read; a chunk larger than that is one `invalid` record."""
    fs, root = filesystem(target)
    root = root.rstrip("/")
    records: list[dict[str, Any]] = []
    read = 0
    while read < MAX_BATCH_BYTES:
        name = chunk_name(consumed + 1)
        try:
            data = bytes(fs.cat_file(f"{root}/{name}", start=0, end=MAX_BATCH_BYTES + 1))
        except FileNotFoundError:
            return records, str(consumed)
        read += len(data)
        if len(data) > MAX_BATCH_BYTES:
            records.append(_too_long(data, f"a chunk of more than {MAX_BATCH_BYTES} bytes", name))
            consumed += 1
            continue
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
        records += [parse_line(line, f"{name} line {i}") for i, line in enumerate(lines, 1)]
        consumed += 1
    return records, str(consumed)


def parse_line(raw: bytes, where: str) -> dict[str, Any]:
    """One record from one line, or an `invalid` record saying why not (a line over MAX_RECORD_BYTES, too)."""
    if len(raw) > MAX_RECORD_BYTES:
        return _too_long(raw, f"a record of {len(raw)} bytes", where)
    text = raw.decode("utf-8", errors="replace")
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _invalid(text, f"not JSON ({exc})", where)
    reason = _check(value)
    if reason:
        return _invalid(text, reason, where)
    if value["type"] in ("metric", "heartbeat"):
        value.setdefault("step", None)
    if value["type"] == "metric" and isinstance(value["value"], str):
        value["value"] = NONFINITE[value["value"]]
    return dict(value)


def _invalid(text: str, reason: str, where: str) -> dict[str, Any]:
    return {"type": "invalid", "line": text[:INVALID_LINE_CHARS], "reason": reason, "where": where}


Check = tuple[str, Callable[[Any], bool], str]


INT_LIMIT = 2**63
"""A record's integers are signed 64-bit, as the store keeps them (a larger one would overflow its insert)."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and -INT_LIMIT <= x < INT_LIMIT


def _is_number(x: Any) -> bool:
    return _is_int(x) or (isinstance(x, float) and math.isfinite(x))


def _is_name(x: Any) -> bool:
    return isinstance(x, str) and bool(x)


METRIC_NAME_CHARS = 128
URI_CHARS = 2048
"""The longest metric name and checkpoint URI the store's columns hold (PostgreSQL refuses a longer one)."""


def _is_metric_name(x: Any) -> bool:
    return _is_name(x) and len(x) <= METRIC_NAME_CHARS


def _is_uri(x: Any) -> bool:
    return _is_name(x) and len(x) <= URI_CHARS


def _is_step(x: Any) -> bool:
    return x is None or _is_int(x)


def _is_value(x: Any) -> bool:
    return _is_number(x) or (isinstance(x, str) and x in NONFINITE)


_ENVELOPE: tuple[Check, ...] = (
    ("ts", _is_number, "a number"),
    ("run", lambda x: isinstance(x, str), "a string"),
    ("attempt", _is_int, "an integer"),
)
_FIELDS: dict[str, tuple[Check, ...]] = {
    "metric": (
        ("name", _is_metric_name, f"a non-empty string of at most {METRIC_NAME_CHARS} characters"),
        ("value", _is_value, 'a number or "nan", "inf", "-inf"'),
        ("step", _is_step, "an integer or null"),
    ),
    "heartbeat": (("step", _is_step, "an integer or null"),),
    "checkpoint": (
        ("step", _is_int, "an integer"),
        ("uri", _is_uri, f"a non-empty string of at most {URI_CHARS} characters"),
        ("tokens", _is_step, "an integer or null"),
    ),
    "event": (("name", _is_name, "a non-empty string"), ("data", lambda x: isinstance(x, dict), "an object")),
}
_OPTIONAL = frozenset({("metric", "step"), ("heartbeat", "step"), ("checkpoint", "tokens")})


def _check(value: Any) -> str | None:
    """Why `value` is not a v1 record, or None."""
    if not isinstance(value, dict):
        return f"a record must be a JSON object (got {type(value).__name__})"
    if value.get("v") != RECORD_VERSION:
        return f"unsupported record version v={value.get('v')!r}; this reader understands v={RECORD_VERSION}"
    if value.get("type") not in RECORD_TYPES:
        return f"unknown record type {value.get('type')!r}; expected one of {', '.join(RECORD_TYPES)}"
    for key, ok, what in _ENVELOPE + _FIELDS[value["type"]]:
        if key not in value and (value["type"], key) in _OPTIONAL:
            continue
        if key not in value:
            return f"{value['type']} record lacks {key!r}"
        if not ok(value[key]):
            return f"{value['type']} record field {key!r} must be {what} (got {value[key]!r})"
    return None
