"""User-named files: `fleet apply` reads through the bounded reader, `store backup` and `report --out` write
only to a new path or a regular file, and a refused MLflow URI is a clear error; none gives a traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crossrail.cli.app import app
from crossrail.client import Client

# Runs `fleet apply` on each file, locally and with --server, in a child process with a memory ceiling and a
# timeout: a reader that follows /dev/zero or waits on a FIFO fails the test instead of the machine.
APPLY_DRIVER = textwrap.dedent(
    """
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    from typer.testing import CliRunner
    from crossrail.cli.app import app

    home, server, *files = sys.argv[1:]
    for name in files:
        for where in (["--home", home], ["--server", server]):
            r = CliRunner().invoke(app, ["fleet", "apply", *where, name])
            crashed = r.exception is not None and not isinstance(r.exception, SystemExit)
            print(json.dumps({"file": name, "via": where[0], "exit": r.exit_code, "crashed": crashed}), flush=True)
    """
)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    Client.init(root)
    return root / ".crossrail"


def cli(*args: str) -> tuple[int, str, BaseException | None]:
    """Exit code, output and any exception other than the CLI's own exit."""
    result = CliRunner().invoke(app, list(args))
    crash = result.exception if not isinstance(result.exception, SystemExit) else None
    return result.exit_code, result.output, crash


def bad_files(where: Path) -> list[str]:
    os.mkfifo(where / "fleet.fifo")
    (where / "utf16.yaml").write_bytes("apiVersion: crossrail/v1\n".encode("utf-16"))
    (where / "binary.yaml").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    (where / "a-dir").mkdir()
    os.symlink(where / "loop-b", where / "loop-a")
    os.symlink(where / "loop-a", where / "loop-b")
    names = ["fleet.fifo", "utf16.yaml", "binary.yaml", "a-dir", "loop-a", "missing.yaml"]
    return ["/dev/zero", "/dev/urandom", *(str(where / n) for n in names)]


@pytest.mark.slow
def test_fleet_apply_refuses_devices_fifos_and_unreadable_files_without_a_traceback(home: Path, tmp_path: Path) -> None:
    files = bad_files(tmp_path)
    before = (home / "fleet.yaml").read_bytes()
    # Port 9 (discard) answers nothing: the file is refused before any request is made.
    args = [sys.executable, "-c", APPLY_DRIVER, str(home), "http://127.0.0.1:9", *files]
    try:
        done = subprocess.run(args, capture_output=True, timeout=120, check=False, text=True)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"fleet apply hung; answered before that: {exc.stdout!r}")
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == 2 * len(files), done.stderr[-2000:]
    assert [r for r in results if r["crashed"] or r["exit"] != 1] == []
    assert (home / "fleet.yaml").read_bytes() == before


def test_fleet_apply_still_applies_a_good_file(home: Path, tmp_path: Path) -> None:
    good = tmp_path / "fleet.yaml"
    good.write_bytes((home / "fleet.yaml").read_bytes())
    code, output, crash = cli("fleet", "apply", "--home", str(home), str(good))
    assert (code, crash) == (0, None), output


def _kind(path: Path) -> int:
    return stat.S_IFMT(path.lstat().st_mode)


def test_store_backup_force_never_replaces_a_device_fifo_link_or_directory(home: Path, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "a.fifo")
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "target.txt").write_text("keep me")
    os.symlink(tmp_path / "target.txt", tmp_path / "a-link")
    nodes = ["a.fifo", "a-dir", "a-link"]
    if os.geteuid() == 0:  # /dev/full's own numbers, in the test's directory
        os.mknod(tmp_path / "full", stat.S_IFCHR | 0o666, os.makedev(1, 7))
        nodes.append("full")
    kinds = {n: _kind(tmp_path / n) for n in nodes}
    for name in nodes:
        code, output, crash = cli("store", "backup", str(tmp_path / name), "--force", "--home", str(home))
        assert crash is None, (name, output)
        assert code != 0, (name, output)
    assert {n: _kind(tmp_path / n) for n in nodes} == kinds
    assert (tmp_path / "target.txt").read_text() == "keep me"


def test_store_backup_force_still_overwrites_a_regular_file(home: Path, tmp_path: Path) -> None:
    dest = tmp_path / "state.bak"
    dest.write_text("an older backup")
    code, output, crash = cli("store", "backup", str(dest), "--force", "--home", str(home))
    assert (code, crash) == (0, None), output
    assert dest.read_bytes().startswith(b"SQLite format 3")


def test_report_out_onto_a_file_or_through_a_link_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    existing = tmp_path / "notes.txt"
    existing.write_text("mine")
    code, output, crash = cli("report", "--out", str(existing), "--home", str(home))
    assert crash is None, output
    assert code != 0, output
    assert existing.read_text() == "mine"

    out = tmp_path / "out"
    out.mkdir()
    os.symlink(existing, out / "report.md")  # writing report.md would write through to notes.txt
    code, output, crash = cli("report", "--out", str(out), "--home", str(home))
    assert crash is None, output
    assert code != 0, output
    assert existing.read_text() == "mine"


@pytest.mark.slow
def test_export_mlflow_to_a_file_uri_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    code, output, crash = cli("export", "mlflow", "--tracking-uri", f"file://{tmp_path}/mlruns", "--home", str(home))
    assert crash is None, output
    assert code == 2, output
    assert "sqlite:///" in output  # the way out is named


# `simulate` reads its workload, trace and matrix files the same way; each in a child with a timeout too.
SIM_DRIVER = textwrap.dedent(
    """
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    from crossrail.errors import SpecError
    from crossrail.sim.workload import parse_workload

    matrix, *files = sys.argv[1:]
    for name in files:
        for workload, throughputs in ((name, None), (f"gavel:{name}", matrix), (f"philly:{name}", None)):
            try:
                parse_workload(workload, throughputs=throughputs)
                answer = "read"
            except SpecError:
                answer = "refused"
            except BaseException as exc:
                answer = type(exc).__name__
            print(json.dumps({"workload": workload, "answer": answer}), flush=True)
    """
)


def test_simulate_refuses_devices_fifos_and_unreadable_workload_files(tmp_path: Path) -> None:
    files = bad_files(tmp_path)
    matrix = Path(__file__).parents[2] / "data" / "gavel" / "simulation_throughputs.json"
    try:
        done = subprocess.run(
            [sys.executable, "-c", SIM_DRIVER, str(matrix), *files],
            check=False,
            capture_output=True,
            timeout=120,
            text=True,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"simulate hung reading a file; answered before that: {exc.stdout!r}")
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(results) == 3 * len(files), done.stderr[-2000:]
    assert [r for r in results if r["answer"] != "refused"] == []
