"""The `crossrail` command: parse, call the client, render. Exit codes: 0 ok, 1 bad input or failed run, 2 usage."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from crossrail.cli import output
from crossrail.cli.common import Home, Interval, Json, Policy, RunRef, Server, client, guard, local_client, refuse_json
from crossrail.cli.lazy import Registry, defer_coercion
from crossrail.cli.output import emit
from crossrail.core.api import MAX_INT, QUEUE_PAGE
from crossrail.errors import UsageError

app = typer.Typer(
    name="crossrail",
    help="A control plane for training fleets that mix TPUs and GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
lazy = Registry(app)
"""Commands whose module loads only when they run: one module per group of commands (docs/cli.md)."""
defer_coercion()  # options are coerced (through pydantic) only when given


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        typer.echo(f"crossrail {version('crossrail')}")
        raise typer.Exit()


@app.callback()
def _options(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print crossrail's version and exit."),
    ] = False,
    server: Annotated[
        str | None,
        typer.Option(
            "--server",
            help="Talk to a `crossrail serve` at this URL for every run and fleet command (as $CROSSRAIL_SERVER).",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", help="The API token a server command sends (as $CROSSRAIL_TOKEN).", show_default=False),
    ] = None,
    wide: Annotated[
        bool, typer.Option("--wide", help="Print tables at full width, never cut (as when piped); any command.")
    ] = False,
) -> None:
    """A control plane for training fleets that mix TPUs and GPUs."""
    if server is not None:  # `crossrail --server URL status` reads as `crossrail status --server URL`
        os.environ["CROSSRAIL_SERVER"] = server
    if token is not None:  # `crossrail --token T status` sends it to whichever server the command talks to
        os.environ["CROSSRAIL_TOKEN"] = token
    if wide:
        output.take_wide(["--wide"])


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="Where to create .crossrail/.")] = Path("."),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing workspace's files.")] = False,
    as_json: Json = False,
) -> None:
    """Create a workspace: a local fleet, the article's policy and example experiments."""
    from crossrail.client import Client

    def go() -> None:
        from crossrail.cli import render

        emit(Client.init(directory, force=force), as_json, render.workspace)

    guard(go)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(help="Experiment, fleet or policy files.")],
    offline: Annotated[
        bool, typer.Option("--offline", help="Check the files alone: no fleet, store, dataset or git checks.")
    ] = False,
    home: Home = None,
    server: Server = None,
    policy: Policy = None,
    as_json: Json = False,
) -> None:
    """Check files and report every problem at once with its line and fix.

    In a workspace, experiments also get every check submit makes: a pool can hold them, their parent
    exists, their dataset is there and their commit is known (`--offline` skips these)."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server, policy) as c:
            result = c.validate(files, offline=offline)
        emit(result, as_json, render.validation)
        if not result["valid"]:
            raise typer.Exit(1)

    guard(go)


@app.command()
def submit(
    file: Annotated[Path, typer.Argument(help="Experiment file.")],
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a field: spec.resources.chips=4.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Submit at most once per key.")
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the run to end (runs an agent here if none is running).")
    ] = False,
    home: Home = None,
    server: Server = None,
    policy: Policy = None,
    as_json: Json = False,
) -> None:
    """Validate, lint and queue an experiment as a new run."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server, policy) as c:
            result = c.submit(file, sets=set_ or [], idempotency_key=idempotency_key)
            if not wait:
                emit(result, as_json, render.submitted)
                return
            if not as_json:
                render.submitted(result)
            shown = c.wait(result["run"]["id"])
            emit(shown, as_json, render.finished)  # one line; the whole run with --json or `show`
            if shown["run"]["state"] != "succeeded":
                raise typer.Exit(1)

    guard(go)


@app.command()
def resubmit(
    run: RunRef,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the run from its newest checkpoint that verifies: its step, optimizer, data cursor and "
            "RNG, to the experiment's total steps (before 0.x it restarted the step count with a fresh optimizer; "
            "that is now --from-weights).",
        ),
    ] = False,
    from_weights: Annotated[
        bool,
        typer.Option("--from-weights", help="Start a new training initialised from the run's newest checkpoint."),
    ] = False,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Queue a new run of a run's recorded spec."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server) as c:
            result = c.resubmit(run, resume=resume, from_weights=from_weights, idempotency_key=idempotency_key)
            emit(result, as_json, render.submitted)

    guard(go)


@app.command()
def status(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Redraw every --interval until Ctrl-C.")] = False,
    interval: Interval = 2.0,
    count: Annotated[int | None, typer.Option("--count", min=1, help="With --watch: stop after N views.")] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """The agent's liveness, runs per stage and state, and the active runs with pool, step, loss and checkpoint."""

    def go() -> None:
        with client(home, server) as c:
            if watch:
                from crossrail.cli import follow

                refuse_json(as_json, "--watch")
                follow.until_interrupted(lambda: follow.watch_status(c, interval_s=interval, count=count))
                return
            emit(c.status(), as_json, _status_tables)

    guard(go)


def _status_tables(obj: dict[str, Any]) -> None:
    from crossrail.cli import render  # rich: not for --json

    render.status(obj)


@app.command()
def show(run: RunRef, home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """A run with its lineage, attempts, checkpoints and events."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server) as c:
            emit(c.show(run), as_json, render.run)

    guard(go)


@app.command()
def queue(
    limit: Annotated[
        int, typer.Option("--limit", min=0, max=MAX_INT, help="Runs shown per queue; 0: every one.")
    ] = QUEUE_PAGE,
    offset: Annotated[
        int, typer.Option("--offset", min=0, max=MAX_INT, help="Runs skipped at the head of each queue.")
    ] = 0,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Pending runs per queue, in the order they will be considered, with estimated starts (a page per queue)."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server) as c:
            emit(c.queue(limit=limit, offset=offset), as_json, render.queues)

    guard(go)


@app.command()
def events(
    run: Annotated[str | None, typer.Option("--run", help="Only this run's events.")] = None,
    after: Annotated[int, typer.Option("--after", min=0, max=MAX_INT, help="Only events with seq above this.")] = 0,
    limit: Annotated[int | None, typer.Option("--limit", min=1, max=MAX_INT)] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the events' hash chains instead; exit 1 naming any rewritten event.")
    ] = False,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing events as they are appended, until Ctrl-C.")
    ] = False,
    interval: Interval = 1.0,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """The event log, oldest first (`--follow`: one line, or one JSON object, per event as it is appended)."""

    def go() -> None:
        from crossrail.cli import follow, render

        with client(home, server) as c:
            if verify:
                from crossrail.cli.store import verify_events

                verify_events(c, run, as_json)
                return
            if follow_:
                if limit is not None:
                    raise UsageError("--follow prints every new event; leave out --limit")
                follow.until_interrupted(
                    partial(follow.follow_events, c, run, after, as_json=as_json, interval_s=interval)
                )
                return
            emit(c.events(run, after_seq=after, limit=limit), as_json, render.events)

    guard(go)


def _change(action: str) -> Any:
    def command(run: RunRef, home: Home = None, server: Server = None, as_json: Json = False) -> None:
        def go() -> None:
            from crossrail.cli import render

            with client(home, server) as c:
                emit(getattr(c, action)(run), as_json, render.changed)

        guard(go)

    command.__doc__ = {
        "cancel": "Cancel a run; a terminal run is refused and left as it is.",
        "suspend": "Take a run out of its queue (or stop it) until it is resumed.",
        "resume": "Put a suspended run back in its queue.",
    }[action]
    return command


app.command("cancel")(_change("cancel"))
app.command("suspend")(_change("suspend"))
app.command("resume")(_change("resume"))


@app.command()
def report(
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write report.md, report.html and PNG figures to this directory.")
    ] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="With --out: the cost table's window starts here (2026-11-01).")
    ] = None,
    before: Annotated[
        str | None, typer.Option("--before", help="With --out: runs before (filters, as compare takes them).")
    ] = None,
    after: Annotated[
        str | None, typer.Option("--after", help="With --out: runs after, for the compare figure.")
    ] = None,
) -> None:
    """Research-cycle metrics per stage and pool, from the event log; with --out, a report with figures."""

    def go() -> None:
        from crossrail.cli import render

        if out is None:
            if since or before or after:
                raise UsageError("--since, --before and --after shape the written report: add --out DIR")
            with client(home, server) as c:
                emit(c.report(), as_json, render.report)
            return
        from crossrail.cli.report_out import write_report

        write_report(home, server, out, since=since, before=before, after=after, as_json=as_json)

    guard(go)


@app.command()
def agent(
    until_idle: Annotated[bool, typer.Option("--until-idle", help="Stop when no run is queued or running.")] = False,
    poll: Annotated[float, typer.Option("--poll", min=0.05, help="Seconds between reconcile passes.")] = 0.5,
    fallback_wait: Annotated[
        float, typer.Option("--fallback-wait", min=0, help="Seconds a run waits for its preferred accelerator.")
    ] = 60.0,
    grace: Annotated[
        float, typer.Option("--grace", min=0, help="Seconds a stopped attempt gets to checkpoint.")
    ] = 30.0,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=1, max=65535, help="Serve Prometheus /metrics on this port."),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option("--metrics-host", help="Address /metrics listens on (0.0.0.0 for a scraper elsewhere).")
    ] = "127.0.0.1",
    report_url: Annotated[
        str | None,
        typer.Option(
            "--report-url",
            envvar="CROSSRAIL_REPORT_URL",
            help="A `crossrail serve` URL: Kubernetes attempts post their reports to it (docs/api.md#ingest).",
        ),
    ] = None,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--lease-seconds",
            min=0.1,
            help="On a PostgreSQL store: the leader's lease; a standby takes over after this long without renewal.",
        ),
    ] = 15.0,
    home: Home = None,
) -> None:
    """Run the reconcile agent: admit queued runs, launch, watch, checkpoint, retry.

    Any number of agents may share one PostgreSQL store: one leads, the others stand by (docs/high-availability.md).
    A SQLite workspace runs one agent, under the workspace's lock."""

    def go() -> None:
        from crossrail.cli import render
        from crossrail.control.agent.loop import AgentConfig

        if report_url is not None and not report_url.startswith(("http://", "https://")):
            raise UsageError(f"--report-url {report_url!r} is not an http:// or https:// URL of a crossrail serve")
        cfg = AgentConfig(
            poll_s=poll,
            fallback_wait_s=fallback_wait,
            stop_grace_s=grace,
            report_url=report_url,
            lease_s=lease_seconds,
        )
        with local_client(home) as c, _one_agent(c):
            output.console.print(f"crossrail agent on {c.workspace.root} (Ctrl-C stops it; attempts keep running)")
            if metrics_port is not None:
                _serve_metrics(c, metrics_host, metrics_port)
            with _stop_between_passes() as stopping, contextlib.suppress(KeyboardInterrupt):
                ticks = render.AgentTicks(c.service.store)
                c.agent(cfg).run(until_idle=until_idle, should_stop=stopping.is_set, on_tick=ticks)
            if stopping.is_set():
                output.console.print("agent stopped; running attempts continue and are re-adopted on restart")

    guard(go)


def _one_agent(c: Any) -> contextlib.AbstractContextManager[None]:
    """SQLite: the workspace's lock keeps one agent; a server store elects a leader among any number of them."""
    from crossrail.control.agent.lock import agent_lock

    if c.service.store.path is None:
        return contextlib.nullcontext()
    return agent_lock(c.workspace.root)


@contextlib.contextmanager
def _stop_between_passes() -> Iterator[threading.Event]:
    """Ctrl-C (or SIGTERM) asks the agent to stop after its current pass, so no pass stops halfway through a store
    write; a second Ctrl-C interrupts at once. The previous handlers come back afterwards."""
    stopping = threading.Event()

    def ask(signum: int, _frame: Any) -> None:
        if stopping.is_set() and signum == signal.SIGINT:
            raise KeyboardInterrupt
        stopping.set()

    before = {sig: signal.signal(sig, ask) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stopping
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _serve_metrics(c: Any, host: str, port: int) -> None:
    """Serve the workspace's Prometheus metrics from a thread of this process (docs/metrics.md#prometheus);
    beyond loopback a scrape needs a token, as `crossrail serve` does (docs/auth.md)."""
    from crossrail.errors import WorkspaceError

    try:
        from crossrail.api.prom import serve_metrics
    except ImportError as exc:
        raise WorkspaceError(
            f"--metrics-port needs the api extra ({exc}); install it: pip install 'crossrail[api]'"
        ) from None
    from crossrail.api.session import is_loopback

    try:
        serve_metrics(c, host, port)
    except OSError as exc:
        raise WorkspaceError(f"--metrics-port {port}: cannot listen on {host}:{port} ({exc.strerror})") from None
    needs = "" if is_loopback(host) else ", a bearer token required (crossrail token create)"
    output.console.print(f"Prometheus metrics on http://{host}:{port}/metrics{needs}")


@app.command()
def logs(
    run: RunRef,
    attempt: Annotated[int | None, typer.Option("--attempt", min=1, max=MAX_INT, help="Only this attempt.")] = None,
    part: Annotated[str | None, typer.Option("--part", help="Only this part of a pipeline run (spec.parts).")] = None,
    follow_: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing the latest attempt's output until it ends.")
    ] = False,
    interval: Interval = 1.0,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Each attempt's log, with its pool and how it ended (`-f`: follow the latest attempt until it ends)."""

    def go() -> None:
        from crossrail.cli import follow, render

        with client(home, server) as c:
            if follow_:
                refuse_json(as_json, "--follow")
                follow.until_interrupted(lambda: follow.follow_logs(c, run, attempt, interval_s=interval, part=part))
                return
            emit(c.logs(run, attempt, part), as_json, render.logs)

    guard(go)


@app.command()
def demo(
    quick: Annotated[bool, typer.Option("--quick", help="A reduced demo (fewer, shorter runs) for tests.")] = False,
    directory: Annotated[
        Path | None, typer.Option("--dir", help="Where to create the demo workspace (default: a new temporary one).")
    ] = None,
) -> None:
    """A fresh workspace: real training runs on a TPU-like and a GPU-like pool, a killed attempt and its retry."""
    from crossrail.cli.demo import run_demo

    def go() -> None:
        run_demo(quick=quick, directory=directory)

    guard(go)


lazy.group("ckpt", "crossrail.cli.ckpt:ckpt_app", help="List, show and verify crossrail-ckpt/v1 checkpoints.")
lazy.group("store", "crossrail.cli.store:store_app")  # store check, backup and restore
lazy.group("deploy", "crossrail.cli.deploy:deploy_app")  # deploy render
lazy.command("place", "crossrail.cli.place:place_command")  # placement explanations
lazy.command("simulate", "crossrail.cli.sim:simulate_command")  # the fleet simulator
lazy.command("plan", "crossrail.cli.sim:plan_command")

fleet_app = typer.Typer(help="Show and change the fleet: apply a file, drain and undrain pools.", no_args_is_help=True)
app.add_typer(fleet_app, name="fleet")

lazy.command("render", "crossrail.cli.manifests:render_command")  # render, fleet render and import
lazy.command("import", "crossrail.cli.manifests:import_command")
lazy.command("compare", "crossrail.cli.verdict:compare_command")  # compare, policy check and metrics
lazy.group("policy", "crossrail.cli.verdict:policy_app")
lazy.command("metrics", "crossrail.cli.verdict:metrics_command")
lazy.command("readiness", "crossrail.cli.readiness:readiness_command")  # the readiness audit

fleet_lazy = Registry(fleet_app)
fleet_lazy.command("render", "crossrail.cli.manifests:fleet_render_command")


@fleet_app.command("show")
def fleet_show(home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """Pools with chips in use, drained state and reservations."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server) as c:
            emit(c.fleet_show(), as_json, render.fleet)

    guard(go)


@fleet_app.command("apply")
def fleet_apply(
    file: Annotated[Path, typer.Argument(help="The new fleet file.")],
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Replace the workspace fleet with FILE (validated first); capacity changes become events."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server) as c:
            emit(c.fleet_apply(file), as_json, render.fleet_change)

    guard(go)


def _drain(drained: bool) -> Any:
    def command(
        pool: Annotated[str, typer.Argument(help="Pool name.")],
        home: Home = None,
        server: Server = None,
        as_json: Json = False,
    ) -> None:
        def go() -> None:
            from crossrail.cli import render

            with client(home, server) as c:
                emit(c.drain(pool, drained=drained), as_json, render.fleet_change)

        guard(go)

    command.__doc__ = (
        "Take no new work on POOL; running work finishes (or is preempted if the fleet says so)."
        if drained
        else "Let POOL take new work again."
    )
    return command


fleet_app.command("drain")(_drain(True))
fleet_app.command("undrain")(_drain(False))


@app.command()
def reserve(
    pool: Annotated[str, typer.Argument(help="Pool name.")],
    chips: Annotated[int, typer.Option("--chips", min=1, max=MAX_INT, help="Chips to hold (whole hosts).")],
    start: Annotated[str, typer.Option("--start", help="ISO time with a zone, or 'now'.")],
    duration: Annotated[str, typer.Option("--duration", help="How long, e.g. 14d or 6h.")],
    team: Annotated[str | None, typer.Option("--team", help="The team the capacity is held for.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="Reservation name (default: <pool>-<n>).")] = None,
    home: Home = None,
    server: Server = None,
    as_json: Json = False,
) -> None:
    """Hold capacity of a pool from a time; before it, only work that ends in time is backfilled."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server) as c:
            out = c.reserve(pool, chips=chips, start=start, duration=duration, team=team, name=name)
            emit(out, as_json, render.fleet_change)

    guard(go)


@app.command()
def reservations(home: Home = None, server: Server = None, as_json: Json = False) -> None:
    """Reservations and their state now."""

    def go() -> None:
        from crossrail.cli import render

        with client(home, server) as c:
            emit(c.reservations(), as_json, render.reservations)

    guard(go)


lazy.command("serve", "crossrail.cli.serve:serve_command")
lazy.group("token", "crossrail.cli.access:token_app")  # tokens, whoami, audit and usage
lazy.command("whoami", "crossrail.cli.access:whoami_command")
lazy.command("audit", "crossrail.cli.access:audit_command")
lazy.command("usage", "crossrail.cli.access:usage_command")
lazy.group("export", "crossrail.cli.export:export_app")
lazy.group("sweep", "crossrail.cli.sweep:sweep_app")  # sweeps and scaling fits
lazy.command("fit", "crossrail.cli.sweep:fit_command")


def main() -> None:
    sys.argv[1:] = output.take_wide(sys.argv[1:])  # `--wide` anywhere: full-width tables
    _only(_command_named(sys.argv[1:]))
    app()


GLOBAL_VALUES = frozenset({"--server", "--token"})
"""The app's own options that take a value (before the command's name)."""


def _command_named(args: list[str]) -> str | None:
    """The command (or group) `args` name, after the app's own options; None when they name none."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in GLOBAL_VALUES:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _only(name: str | None) -> None:
    """Keep only the command (or group) `name` in the app when it is one: typer builds every command's parameters
    before it runs one (each annotation evaluated; coerced only when given, lazy.defer_coercion). Any other word
    (a typo, none, `--help`) keeps them all, for click's usage, suggestions and help."""
    commands = [c for c in app.registered_commands if (c.name or _name_of(c.callback)) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if commands or groups or name in lazy.entries:  # a lazy one is found by name when it runs (cli/lazy.py)
        app.registered_commands, app.registered_groups = commands, groups


def _name_of(callback: Any) -> str | None:
    """The name typer gives a command registered without one: its function's, with `_` as `-`."""
    return None if callback is None else str(callback.__name__).replace("_", "-")


if __name__ == "__main__":
    main()
