"""`crossrail render`, `crossrail fleet render` and `crossrail import`: manifests out, experiments in.

Output goes to stdout (YAML, or the sbatch script) unless `-o DIR` (render) or `-o FILE` (import) is
given; summaries and findings go to stderr as tables, so stdout can be piped to `kubectl apply -f -`.
Exit status: 0 done, 1 bad input (one line per problem, never a traceback), 2 usage.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from crossrail.cli.common import Home, guard
from crossrail.errors import SpecError

if TYPE_CHECKING:
    from crossrail.spec import Fleet


class RenderTarget(StrEnum):
    KUBERNETES = "kubernetes"
    SLURM = "slurm"
    SKYPILOT = "skypilot"


class FleetTarget(StrEnum):
    KUEUE = "kueue"
    TRAINER = "trainer"


class KueueApi(StrEnum):
    V1BETA1 = "v1beta1"
    V1BETA2 = "v1beta2"


FleetFile = Annotated[
    Path | None, typer.Option("--fleet", help="Fleet file (default: the workspace's fleet).", show_default=False)
]
ImageDigest = Annotated[
    str | None, typer.Option("--image-digest", help="Pin the image to this digest (sha256:<64 hex>).")
]


def _fleet(fleet_file: Path | None, home: Path | None) -> Fleet:
    from crossrail.spec import load_fleet

    if fleet_file is not None:
        return load_fleet(fleet_file)
    from crossrail.client import Client

    fleet: Fleet = Client.local(home).load_fleet()
    return fleet


def _yaml(objects: list[dict[str, Any]]) -> str:
    import yaml

    return yaml.safe_dump_all(objects, sort_keys=False, allow_unicode=True, width=120)


def render_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    file: Annotated[Path, typer.Argument(help="Experiment file.")],
    pool: Annotated[
        str,
        typer.Option(
            "--pool", help="The pool of the fleet to render for; for a run with parts, PART=POOL,... (or one for all)."
        ),
    ],
    target: Annotated[RenderTarget, typer.Option("--target", help="What to render.")] = RenderTarget.KUBERNETES,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write into this directory.")] = None,
    run: Annotated[str | None, typer.Option("--run", help="Run id (default: <experiment>-1).")] = None,
    attempt: Annotated[int, typer.Option("--attempt", min=1, help="Attempt number.")] = 1,
    image_digest: ImageDigest = None,
    allow_unpinned: Annotated[
        bool, typer.Option("--allow-unpinned", help="Render an image that is not pinned by digest as it is.")
    ] = False,
    force_backend: Annotated[
        bool,
        typer.Option(
            "--force-backend", help="Render a Kubernetes workload for a pool whose backend is not kubernetes."
        ),
    ] = False,
    fleet_file: FleetFile = None,
    home: Home = None,
) -> None:
    """Render an experiment for a pool: a Kubernetes Job/JobSet, an sbatch script or a SkyPilot task."""

    def go() -> None:
        from crossrail.executors.render.hardware import layout
        from crossrail.executors.render.trainjob import gang
        from crossrail.executors.render.workload import from_experiment
        from crossrail.spec import load_experiment

        fleet = _fleet(fleet_file, home)
        exp = load_experiment(file)
        if exp.parts:
            _render_parts(
                exp, file, fleet, pool, target, output=output, run=run, attempt=attempt, image_digest=image_digest,
                allow_unpinned=allow_unpinned,
            )  # fmt: skip
            return
        try:
            chosen = fleet.pool(pool)
        except KeyError as exc:
            raise SpecError([_problem(f"fleet {fleet.name}", "--pool", str(exc.args[0]))]) from None
        work = from_experiment(
            exp, source=str(file), run=run, attempt=attempt, image_digest=image_digest, allow_unpinned=allow_unpinned
        )
        text, suffix, kind = _render(target, work, fleet, chosen, force_backend=force_backend)
        if output is None:
            sys.stdout.write(text)
        else:
            output.mkdir(parents=True, exist_ok=True)
            path = output / f"{work.object_name}{suffix}"
            path.write_text(text)
            if kind == "TrainJob":
                g = gang(fleet, chosen, work)
                shape = (
                    f"{g.nodes} node(s) x {g.procs_per_node} worker(s) x {g.chips_per_node // g.procs_per_node} chips"
                )
            else:
                lay = layout(fleet, chosen, work.chips)
                shape = f"{lay.slices} x {lay.hosts_per_slice} host(s) x {lay.chips_per_pod} chips"
            _summary("rendered", [{"file": str(path), "kind": kind, "pool": pool, "layout": shape}])

    guard(go)


def _render_parts(exp: Any, file: Path, fleet: Fleet, pools: str, target: RenderTarget, **options: Any) -> None:
    """A run with parts: one JobSet with a replicated job per part, each part on its pool of `--pool`."""
    from crossrail.executors.render.kubernetes import header
    from crossrail.executors.render.pipeline import render_pipeline
    from crossrail.executors.render.workload import from_experiment

    output: Path | None = options.pop("output")
    if target is not RenderTarget.KUBERNETES:
        message = f"a run with parts renders only for kubernetes (one JobSet), not {target.value}"
        raise SpecError([_problem(str(file), "spec.parts", message)])
    given = (
        dict(p.split("=", 1) for p in pools.split(",") if "=" in p) if "=" in pools else dict.fromkeys(exp.parts, pools)
    )
    problems = [
        _problem(str(file), "--pool", f"no pool named for part {name}; add {name}=POOL")
        for name in exp.parts
        if name not in given
    ]
    problems += [
        _problem(str(file), "--pool", f"{name} is not a part of the run; its parts are {', '.join(exp.parts)}")
        for name in given
        if name not in exp.parts
    ]
    chosen = {}
    for name, pool_name in given.items():
        try:
            chosen[name] = fleet.pool(pool_name)
        except KeyError as exc:
            problems.append(_problem(f"fleet {fleet.name}", "--pool", str(exc.args[0])))
    if problems:
        raise SpecError(problems)
    work = from_experiment(exp, source=str(file), **options)
    text = header() + _yaml([render_pipeline(work, fleet, exp.parts, chosen)])
    if output is None:
        sys.stdout.write(text)
        return
    output.mkdir(parents=True, exist_ok=True)
    path = output / f"{work.object_name}.yaml"
    path.write_text(text)
    _summary("rendered", [{"file": str(path), "kind": "JobSet", "pool": f"{n}={p.name}"} for n, p in chosen.items()])


def _problem(source: str, path: str, message: str) -> Any:
    from crossrail.errors import Problem, ProblemCode

    return Problem(source, path, message, code=ProblemCode.BAD_VALUE)


def _render(target: RenderTarget, work: Any, fleet: Fleet, pool: Any, *, force_backend: bool) -> tuple[str, str, str]:
    """(text, file suffix, kind) of the rendered workload."""
    if target is RenderTarget.KUBERNETES:
        from crossrail.executors.render.kubernetes import header, render_kubernetes

        obj = render_kubernetes(work, fleet, pool, force_backend=force_backend)
        return header() + _yaml([obj]), ".yaml", str(obj["kind"])
    if target is RenderTarget.SLURM:
        from crossrail.executors.render.slurm import render_sbatch

        return render_sbatch(work, fleet, pool), ".sbatch", "sbatch"
    from crossrail.executors.render.skypilot import render_skypilot

    return _yaml([render_skypilot(work, fleet, pool)]), ".sky.yaml", "SkyPilot task"


def fleet_render_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    target: Annotated[FleetTarget, typer.Option("--target", help="What to render.")] = FleetTarget.KUEUE,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write kueue.yaml into this directory.")] = None,
    kueue_api: Annotated[
        KueueApi,
        typer.Option(
            "--kueue-api",
            help="Kueue API version of the objects; the targeted Kueue serves both, v1beta2 is its storage version.",
        ),
    ] = KueueApi.V1BETA2,
    cluster: Annotated[
        str | None,
        typer.Option("--cluster", help="A worker cluster of spec.clusters: its objects (default: the manager's)."),
    ] = None,
    fleet_file: FleetFile = None,
    home: Home = None,
) -> None:
    """Render the fleet as Kueue objects (namespaces, topology, flavors, cohorts, priority classes, queues,
    provisioning and MultiKueue admission checks), or with --target trainer the Kubeflow Trainer runtime its
    multi-worker GPU TrainJobs refer to."""

    def go() -> None:
        from collections import Counter

        from crossrail.executors.render.kueue import JOBSET_RELEASE, KUEUE_RELEASE, render_kueue
        from crossrail.executors.render.trainjob import TRAINER_API, TRAINER_SNAPSHOT, cluster_training_runtime

        fleet = _fleet(fleet_file, home)
        if target == FleetTarget.TRAINER:
            objects = [cluster_training_runtime()]
            head = f"# Rendered by crossrail for Kubeflow Trainer {TRAINER_SNAPSHOT} ({TRAINER_API}).\n"
        else:
            objects = render_kueue(fleet, str(kueue_api), cluster)
            head = (
                f"# Rendered by crossrail for Kueue {KUEUE_RELEASE} (kueue.x-k8s.io/{kueue_api}); "
                f"workloads use JobSet {JOBSET_RELEASE}.\n"
            )
        text = head + _yaml(objects)
        if output is None:
            sys.stdout.write(text)
            return
        output.mkdir(parents=True, exist_ok=True)
        path = output / f"{target}.yaml"
        path.write_text(text)
        counts = Counter(str(o["kind"]) for o in objects)
        _summary(f"rendered {path}", [{"kind": k, "objects": n} for k, n in counts.items()])

    guard(go)


def import_command(  # noqa: PLR0917 (a typer command takes each option as a parameter)
    file: Annotated[Path, typer.Argument(help="A Kubernetes batch/v1 Job (YAML).")],
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the experiment to this file.")] = None,
    dataset: Annotated[
        str | None, typer.Option("--dataset", help="Dataset URI, when the Job's arguments name none.")
    ] = None,
    stage: Annotated[str | None, typer.Option("--stage", help="Stage (default: read from the Job's labels).")] = None,
    team: Annotated[str | None, typer.Option("--team", help="Team (default: the Job's namespace).")] = None,
    owner: Annotated[str | None, typer.Option("--owner", help="Owner, e.g. ada@example.com.")] = None,
    code_repo: Annotated[str | None, typer.Option("--code-repo", help="The training code's repository.")] = None,
    image_digest: ImageDigest = None,
) -> None:
    """Turn an existing Job into a hardware-agnostic experiment; list what was hardware-specific and why."""

    def go() -> None:
        from crossrail.executors.render.importer import import_job
        from crossrail.spec import load_document

        doc = load_document(file)
        imported = import_job(
            doc.data,
            str(file),
            dataset=dataset,
            stage=stage,
            team=team,
            owner=owner,
            code_repo=code_repo,
            image_digest=image_digest,
        )
        rows = [f.as_dict() for f in imported.findings]
        _summary(f"imported {file} as experiment {imported.experiment.name}", rows)
        if output is None:
            sys.stdout.write(imported.yaml())
        else:
            output.write_text(imported.yaml())
            typer.echo(f"wrote {output}", err=True)

    guard(go)


def _summary(title: str, rows: list[dict[str, Any]]) -> None:
    from rich.table import Table
    from rich.text import Text

    from crossrail.cli.output import err

    table = Table(title=title, title_justify="left")
    for key in rows[0] if rows else []:
        table.add_column(key, overflow="fold")
    for row in rows:  # as Text: a value such as `[file]` is shown, not taken for rich markup
        table.add_row(*(Text(str(v)) for v in row.values()))
    err.print(table)
