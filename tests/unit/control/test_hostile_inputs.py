"""Submit refuses inputs it cannot digest safely: devices, FIFOs, sockets, system paths, whole filesystems.

Every case goes through the real submit path and must end within its deadline, with a clear error naming
the field and nothing written. pytest-timeout is not installed here, so each submit runs in a thread that
the test gives up on after BACKSTOP_S (generous: a refusal takes milliseconds).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from crossrail.client import Client
from crossrail.control.service import lineage
from crossrail.control.service.lineage import InputLimits, InputRefused
from crossrail.errors import SpecError

BACKSTOP_S = 30.0
DEADLINE_S = 2.0  # the limit submit is given; each case must end well within it


def nothing_written(client: Client) -> bool:
    return client.service.store.list_runs() == [] and client.service.store.last_seq() == 0


def within(seconds: float, fn: Callable[[], Any]) -> tuple[BaseException | None, float]:
    """Run `fn` in a thread; its exception (None if it returned) and how long it took. Fails past `seconds`."""
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    began = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    took = time.monotonic() - began
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s: the input was not refused in time")
    return outcome[0], took


@pytest.fixture
def specials() -> Iterator[dict[str, str]]:
    """A FIFO and a listening Unix socket, in a short temp dir (a socket path has a 108-byte limit)."""
    root = tempfile.mkdtemp(prefix="cr-hostile-", dir="/tmp")
    fifo, sock_path = os.path.join(root, "fifo"), os.path.join(root, "sock")
    os.mkfifo(fifo)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(sock_path)
    sock.listen(1)
    try:
        yield {"fifo": fifo, "socket": sock_path}
    finally:
        sock.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def limited(client: Client) -> Client:
    client.service.input_limits = InputLimits(deadline_s=DEADLINE_S)
    return client


HOSTILE = {
    "dev-zero": ("/dev/zero", "under /dev"),
    "dev-urandom": ("/dev/urandom", "under /dev"),
    "dev-zero-as-file-uri": ("file:///dev/zero", "under /dev"),
    "proc-file": ("/proc/self/status", "under /proc"),
    "proc-kernel-message-buffer": ("/proc/kmsg", "under /proc"),
    "sys-file": ("/sys/kernel/mm/transparent_hugepage/enabled", "under /sys"),
    "a-link-into-proc": ("LINK", "under /proc"),
    "fifo": ("FIFO", "a FIFO (named pipe), not a regular file"),
    "unix-socket": ("SOCKET", "a socket, not a regular file"),
}
FIELDS = {"config": "spec.config", "dataset": "spec.dataset.uri"}


@pytest.mark.parametrize("field", list(FIELDS))
@pytest.mark.parametrize("case", list(HOSTILE))
@pytest.mark.slow
def test_a_hostile_path_is_refused_by_name_in_time_and_nothing_is_written(
    limited: Client, experiments: Path, specials: dict[str, str], tmp_path: Path, field: str, case: str
) -> None:
    uri, expected = HOSTILE[case]
    if uri == "LINK":
        (tmp_path / "innocent.yaml").symlink_to("/proc/self/environ")
        uri = str(tmp_path / "innocent.yaml")
    uri = {"FIFO": specials["fifo"], "SOCKET": specials["socket"]}.get(uri, uri)
    path = FIELDS[field]
    error, took = within(
        BACKSTOP_S, lambda: limited.submit(experiments / "pretrain-small.yaml", sets=[f"{path}={uri}"])
    )
    assert isinstance(error, SpecError), error
    assert took < DEADLINE_S
    [problem] = error.problems
    assert problem.path == path
    assert expected in problem.message
    assert uri in problem.message
    assert problem.fix
    assert ("spec.dataset.version" if field == "dataset" else "regular file") in problem.fix
    assert nothing_written(limited)


@pytest.mark.slow
def test_the_whole_filesystem_as_a_dataset_ends_quickly_asking_for_a_version(
    limited: Client, experiments: Path
) -> None:
    error, took = within(
        BACKSTOP_S, lambda: limited.submit(experiments / "pretrain-small.yaml", sets=["spec.dataset.uri=file:///"])
    )
    assert isinstance(error, SpecError), error
    assert took < DEADLINE_S + 1.0  # the walk stops at its file budget or, on a slow disk, at the deadline
    [problem] = error.problems
    assert problem.path == "spec.dataset.uri"
    assert "file:///" in problem.message
    assert "more than 10000 files" in problem.message or "longer than" in problem.message
    assert problem.fix
    assert "spec.dataset.version" in problem.fix
    assert nothing_written(limited)


def test_the_root_as_a_config_is_refused_as_a_directory(limited: Client, experiments: Path) -> None:
    error, _ = within(
        BACKSTOP_S, lambda: limited.submit(experiments / "pretrain-small.yaml", sets=["spec.config=file:///"])
    )
    assert isinstance(error, SpecError)
    assert [(p.path, p.message) for p in error.problems] == [
        ("spec.config", "file:/// is a directory, not a regular file")
    ]
    assert nothing_written(limited)


def test_a_dataset_version_given_means_the_device_is_never_read(limited: Client, experiments: Path) -> None:
    out = limited.submit(
        experiments / "pretrain-small.yaml", sets=["spec.dataset.uri=/dev/zero", "spec.dataset.version=v1"]
    )
    assert limited.show(out["run"]["id"])["lineage"]["dataset_version"] == "v1"


def write_files(directory: Path, count: int) -> None:
    directory.mkdir()
    for i in range(count):
        (directory / f"part-{i:03d}.txt").write_text(f"shard {i}\n")


@pytest.mark.slow
def test_a_directory_past_the_file_budget_needs_a_version(client: Client, experiments: Path, tmp_path: Path) -> None:
    write_files(tmp_path / "shards", 6)
    client.service.input_limits = InputLimits(dataset_max_files=5)
    with pytest.raises(SpecError) as err:
        client.submit(experiments / "pretrain-small.yaml", sets=[f"spec.dataset.uri={tmp_path / 'shards'}"])
    [problem] = err.value.problems
    assert "holds more than 5 files" in problem.message
    assert problem.fix
    assert "spec.dataset.version" in problem.fix
    assert nothing_written(client)
    client.service.input_limits = InputLimits(dataset_max_files=6)
    out = client.submit(experiments / "pretrain-small.yaml", sets=[f"spec.dataset.uri={tmp_path / 'shards'}"])
    assert client.show(out["run"]["id"])["lineage"]["dataset_version"].startswith("listing-sha256:")


def test_a_dataset_file_past_the_byte_budget_needs_a_version(client: Client, experiments: Path, tmp_path: Path) -> None:
    (tmp_path / "big.bin").write_bytes(b"x" * 4096)
    client.service.input_limits = InputLimits(dataset_max_bytes=4095)
    with pytest.raises(SpecError) as err:
        client.submit(experiments / "pretrain-small.yaml", sets=[f"spec.dataset.uri={tmp_path / 'big.bin'}"])
    [problem] = err.value.problems
    assert (problem.path, problem.message) == (
        "spec.dataset.uri",
        f"{tmp_path / 'big.bin'} is 4096 bytes; crossrail digests at most 4095 bytes of it",
    )
    assert nothing_written(client)


def test_a_config_past_the_byte_budget_is_refused(client: Client, experiments: Path, tmp_path: Path) -> None:
    (tmp_path / "huge.yaml").write_text("a: 1\n" * 100)
    client.service.input_limits = InputLimits(config_max_bytes=100)
    with pytest.raises(SpecError) as err:
        client.submit(experiments / "pretrain-small.yaml", sets=[f"spec.config={tmp_path / 'huge.yaml'}"])
    [problem] = err.value.problems
    assert problem.path == "spec.config"
    assert "is 500 bytes" in problem.message
    assert nothing_written(client)


def test_a_digest_past_its_deadline_is_refused(client: Client, experiments: Path, tmp_path: Path) -> None:
    write_files(tmp_path / "shards", 3)
    client.service.input_limits = InputLimits(deadline_s=0.0)
    error, took = within(
        BACKSTOP_S,
        lambda: client.submit(experiments / "pretrain-small.yaml", sets=[f"spec.dataset.uri={tmp_path / 'shards'}"]),
    )
    assert isinstance(error, SpecError)
    assert took < BACKSTOP_S
    by_path = {p.path: p.message for p in error.problems}  # the config's digest is past the deadline too
    assert by_path == {
        "spec.dataset.uri": f"reading {tmp_path / 'shards'} took longer than 0 s",
        "spec.config": f"reading file://{experiments.parent}/configs/pretrain-small.yaml took longer than 0 s",
    }
    assert nothing_written(client)


@pytest.mark.slow
def test_crossrail_submit_refuses_a_device_dataset_without_a_traceback(checkout: Path, experiments: Path) -> None:
    crossrail = Path(sys.executable).with_name("crossrail")
    proc = subprocess.run(
        [str(crossrail), "submit", str(experiments / "pretrain-small.yaml"), "--set", "spec.dataset.uri=/dev/zero"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=BACKSTOP_S,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "spec.dataset.uri" in proc.stderr
    assert "/dev/zero is under /dev" in proc.stderr
    assert "spec.dataset.version" in proc.stderr
    with Client(cwd=checkout) as client:
        assert nothing_written(client)


@pytest.mark.parametrize("field", ["spec.config", "spec.dataset.uri"])
@pytest.mark.parametrize("uri", ["s3://", "gs:///"])
def test_a_bare_scheme_is_refused_before_anything_is_read(
    client: Client, experiments: Path, field: str, uri: str
) -> None:
    sets = [f"{field}={uri}", "spec.dataset.version=v1"]
    with pytest.raises(SpecError) as err:
        client.submit(experiments / "pretrain-small.yaml", sets=sets)
    [problem] = err.value.problems
    assert problem.path == field
    assert f"{uri!r} names no bucket or path" in problem.message
    assert nothing_written(client)


@pytest.fixture
def memfs() -> Iterator[Any]:
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    yield fs
    fs.store.clear()


def test_object_storage_datasets_keep_to_the_same_budgets(memfs: Any) -> None:
    for i in range(4):
        memfs.pipe_file(f"/data/shards/part-{i}.txt", b"x" * 10)
    memfs.pipe_file("/data/big.bin", b"y" * 100)
    with pytest.raises(InputRefused, match="holds more than 3 files") as err:
        lineage.dataset_version("memory://data/shards", InputLimits(dataset_max_files=3))
    assert "spec.dataset.version" in err.value.fix
    listed = lineage.dataset_version("memory://data/shards", InputLimits(dataset_max_files=4))
    assert listed.startswith("listing-sha256:")
    assert lineage.dataset_version("memory://data/shards") == listed
    with pytest.raises(InputRefused, match="is 100 bytes; crossrail digests at most 99 bytes"):
        lineage.dataset_version("memory://data/big.bin", InputLimits(dataset_max_bytes=99))
    assert lineage.dataset_version("memory://data/big.bin").startswith("sha256:")
    with pytest.raises(InputRefused, match="memory://data/shards is a directory, not a file"):
        lineage.config_digest("memory://data/shards")
