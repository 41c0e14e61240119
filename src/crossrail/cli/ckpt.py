"""`crossrail ckpt`: list, show and verify crossrail-ckpt/v1 checkpoints on local disk or object storage.

Each command takes a checkpoint URI or path, or a run (id, uid or experiment name) of the workspace, which
stands for that run's checkpoint directory. Exit status: 0 all is well, 1 a checkpoint is missing, damaged or
of a newer format, 2 a usage error.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer

from crossrail.cli.output import print_object

if TYPE_CHECKING:
    from crossrail.runtime.stores import CheckpointStore

EXIT_INVALID, EXIT_USAGE = 1, 2
_STEP_DIR = re.compile(r"^step-\d+$")
T = TypeVar("T")

ckpt_app = typer.Typer(
    help="Inspect crossrail-ckpt/v1 checkpoints: list them, show a manifest, verify checksums.",
    no_args_is_help=True,
    add_completion=False,
)

JSON_OPTION = typer.Option(False, "--json", help="Print one JSON object instead of tables.")
HOME_OPTION = typer.Option(
    None,
    "--home",
    envvar="CROSSRAIL_HOME",
    help="Workspace whose runs a run name refers to (default: nearest .crossrail/ above).",
)
STORAGE_OPTION = typer.Option(
    None,
    "--option",
    "-o",
    metavar="KEY=VALUE",
    help="An fsspec storage option (endpoint_url=http://127.0.0.1:9000, token=anon, ...); repeatable. "
    "FSSPEC_S3_ENDPOINT_URL and STORAGE_EMULATOR_HOST in the environment work too.",
)


@ckpt_app.command("ls")
def ls_command(
    uri: str = typer.Argument(..., help="A run, or its checkpoint directory: a path, file://, s3://, gs://, ..."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Check every checksum (reads each checkpoint)."),
    as_json: bool = JSON_OPTION,
    option: list[str] | None = STORAGE_OPTION,
    home: Path | None = HOME_OPTION,
) -> None:
    """List the committed checkpoints of a run, oldest first, with their size and whether they verify.

    A checkpoint that lost its manifest (or, on object storage, kept its marker without one) is listed as
    damaged. Without --verify, only the cheap check runs: manifest, marker and every file's stated size.
    """
    from crossrail.runtime import Checkpointer, CheckpointError
    from crossrail.runtime.checkpoint import listing

    options = _options(option)
    uri = _target(uri, home)
    ckpt = _usage_checked(lambda: Checkpointer(uri, storage_options=options))
    items: list[dict[str, Any]] = []
    try:
        items = listing(ckpt, verify=verify, storage_options=options)
    except (CheckpointError, OSError) as exc:
        _fail(f"cannot list {uri}: {exc}")
    if as_json:
        _print_json("CheckpointList", {"uri": ckpt.uri, "items": items})
    else:
        _print_list(ckpt.uri, items)
    if any(item["verified"] is False for item in items):
        raise typer.Exit(EXIT_INVALID)


@ckpt_app.command("show")
def show_command(
    uri: str = typer.Argument(
        ..., help="A checkpoint (step-*) directory, or a run or its directory for its newest one."
    ),
    as_json: bool = JSON_OPTION,
    option: list[str] | None = STORAGE_OPTION,
    home: Path | None = HOME_OPTION,
) -> None:
    """Print a checkpoint's manifest: step, tokens, tensors, trainer state and lineage (tensors not verified)."""
    from crossrail.runtime import CheckpointError
    from crossrail.runtime.reading import manifest_in

    options = _options(option)
    store, name = _checkpoint(_target(uri, home), options)
    try:
        manifest = manifest_in(store, name)
    except (CheckpointError, OSError) as exc:
        _fail(f"cannot show {store.child(name)}: {exc}")
    if as_json:
        _print_json("CheckpointManifest", {"uri": store.child(name), "manifest": manifest})
    else:
        _print_manifest(store.child(name), manifest)


@ckpt_app.command("verify")
def verify_command(
    uri: str = typer.Argument(
        ..., help="A checkpoint (step-*) directory, or a run or its directory for its newest one."
    ),
    all_: bool = typer.Option(False, "--all", help="Verify every committed checkpoint of the run's directory."),
    as_json: bool = JSON_OPTION,
    option: list[str] | None = STORAGE_OPTION,
    home: Path | None = HOME_OPTION,
) -> None:
    """Check every tensor of a checkpoint against its checksum; exit 1 naming each damaged step, file and tensor.

    For a run (or its directory) the newest checkpoint is verified, damaged or not: an older one is never
    verified in its place. With --all, every one is, a damaged one without its manifest included.
    """
    from crossrail.runtime.checkpoint import verification

    options = _options(option)
    uri = _target(uri, home)
    targets = _all_checkpoints(uri, options) if all_ else [_checkpoint(uri, options)]
    results = [verification(store, name) for store, name in targets]
    ok = all(r["ok"] for r in results)
    if as_json:
        _print_json("CheckpointVerification", {"uri": uri, "ok": ok, "results": results})
    else:
        for r in results:
            where = r["uri"] if r["step"] is None else f"step {r['step']} {r['uri']}"
            typer.echo(f"ok      {where}" if r["ok"] else f"FAILED  {where}: {r['problem']}")
    if not ok:
        raise typer.Exit(EXIT_INVALID)


def _checkpoint(uri: str, options: dict[str, Any]) -> tuple[CheckpointStore, str]:
    """The one checkpoint `uri` names: a `step-*` directory or one holding a manifest, else the run's newest."""
    from crossrail.runtime import Checkpointer
    from crossrail.runtime.manifest import MANIFEST_FILE
    from crossrail.runtime.stores import split

    store, name = _usage_checked(lambda: split(uri, options))
    if _STEP_DIR.match(name) or store.read_small(name, MANIFEST_FILE) is not None:
        if not store.present(name):
            _fail(f"there is no committed checkpoint at {uri}")
        return store, name
    newest = Checkpointer(uri, storage_options=options).list(damaged=True)  # a damaged newest one is never passed over
    if not newest:
        _fail(f"there is no committed checkpoint in {uri}")
    return _usage_checked(lambda: split(newest[-1].uri, options))


def _all_checkpoints(uri: str, options: dict[str, Any]) -> list[tuple[CheckpointStore, str]]:
    from crossrail.runtime import Checkpointer
    from crossrail.runtime.stores import step_dirname

    ckpt = _usage_checked(lambda: Checkpointer(uri, storage_options=options))
    found = ckpt.list(damaged=True)
    if not found:
        _fail(f"there is no committed checkpoint in {uri}")
    return [(ckpt.store, step_dirname(info.step)) for info in found]


def _target(ref: str, home: Path | None) -> str:
    """`ref` as given when it is a URI or an existing path, else the checkpoint directory of the run it names."""
    if "://" in ref or os.sep in ref or os.path.exists(ref):
        return ref
    from crossrail.client import Client
    from crossrail.errors import CrossrailError

    try:
        with Client.local(home) as client:  # checkpoints are read where they lie
            if not client.workspace.root.is_dir():
                _fail(f"{ref} is neither a checkpoint directory nor a run: no workspace at {client.workspace.root}")
            run = client.service.get(ref)
            return str(run.run_checkpoint_dir)
    except CrossrailError as exc:
        _fail(f"{ref} is neither a checkpoint directory nor a run of the workspace ({exc})")


def _options(pairs: list[str] | None) -> dict[str, Any]:
    """`KEY=VALUE` pairs as storage options; a value that parses as JSON (true, 3) is taken as such."""
    options: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--option")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return options


def _usage_checked(make: Callable[[], T]) -> T:
    """`make()`, with a URI this version cannot open turned into a usage error (exit 2)."""
    from crossrail.runtime import CheckpointError

    try:
        return make()
    except CheckpointError as exc:
        typer.echo(f"crossrail ckpt: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from exc


def _fail(message: str) -> NoReturn:
    typer.echo(f"crossrail ckpt: {message}", err=True)
    raise typer.Exit(EXIT_INVALID)


def _print_json(kind: str, body: dict[str, Any]) -> None:
    print_object(kind, body)


def _print_list(uri: str, items: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"checkpoints in {uri}", title_justify="left")
    for column, justify in (("step", "right"), ("size", "right"), ("verified", "left"), ("uri", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for item in items:
        verified = {True: "[green]yes[/]", None: "not checked"}.get(item["verified"], f"[red]no[/]: {item['problem']}")
        table.add_row(str(item["step"]), _size(item["sizeBytes"]), verified, item["uri"])
    Console().print(table if items else f"no committed checkpoints in {uri}")


def _print_manifest(uri: str, manifest: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{uri}[/]  {manifest['format']}  step {manifest['step']}  tokens {manifest.get('tokens')}")
    tensors = Table(title="tensors", title_justify="left")
    for column in ("name", "dtype", "shape", "file", "offset", "length", "checksum"):
        tensors.add_column(column, overflow="fold")  # names and digests are read whole, not cut short
    for e in manifest["tensors"]:
        shape = "[" + ", ".join(map(str, e["shape"])) + "]"
        tensors.add_row(e["name"], e["dtype"], shape, e["file"], str(e["offset"]), str(e["length"]), e["checksum"])
    console.print(tensors)
    for key in ("state", "lineage"):
        console.print(f"[bold]{key}[/]")
        console.print_json(json.dumps(manifest[key]))


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"
