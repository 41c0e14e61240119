"""Submit's checks before anything is written: the experiment against the fleet, its team, parent, code, config
and dataset (each digest bounded in bytes, files and time), with what they resolve to."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crossrail.control.service import lineage
from crossrail.control.service.base import ServiceBase
from crossrail.core.access import EVERYONE, Actor, Sight
from crossrail.errors import InfeasibleError, Problem, ProblemCode, SpecError
from crossrail.store import RunRecord

# The spec, scheduling and metrics layers, and what only submit, resubmit and show use (control.parents,
# isolation, loaded), load only for the commands that use them: `status` needs none of them.
if TYPE_CHECKING:
    from crossrail.spec import Document, Experiment

_FEASIBILITY_PATH = "spec.resources.chips"


@dataclass(frozen=True)
class Preflight:
    """What submit's checks found, before anything is written: problems, warnings and what was resolved."""

    problems: list[Problem]
    warnings: list[str]
    code_commit: str | None
    parent_run: str | None
    parent_checkpoint: str | None
    infeasible: bool = False
    parent_team: str | None = None
    missing_parent: bool = False  # the parent it names has no run yet (one of the problems)

    def error(self) -> SpecError:
        """The problems as one error: an InfeasibleError (also a PlacementError) when no pool could hold it."""
        return InfeasibleError(self.problems) if self.infeasible else SpecError(self.problems)


class _MissingParentError(SpecError):
    """The parent an experiment names has no run its submitter may see."""


class Preflighting(ServiceBase):
    """Submit's checks: everything an experiment names, resolved and checked before anything is written."""

    def preflight(
        self,
        doc: Document,
        exp: Experiment,
        cwd: Path,
        *,
        together: frozenset[str] = frozenset(),
        actor: Actor | None = None,
    ) -> Preflight:
        """Every check submit makes beyond the file, writing and digesting nothing: a pool of the fleet can
        ever hold it, its commit is known (or may be missing, by the policy), its dataset is there (one
        bounded stat or HEAD) and its parent exists and can give it a checkpoint. `validate` and `place`
        call this too; each problem names the file, line (or `--set` argument), field and fix.

        `together`: experiments checked with this one (`validate a.yaml b.yaml`); a parent among them that
        has no run yet is taken as one that will be queued first. With `actor`, a parent outside its sight
        is a parent that does not exist (Sight)."""
        from crossrail.spec.problems import locate

        res = lineage.Resolution()
        problems = self._feasibility(exp, doc.source) + self._host_cores(exp, doc.source)
        res.problems += self._new_team(exp.metadata.team, doc.source)
        sight = self.sight(actor)
        res.warnings += self._team_typo(exp.metadata.team, sight)
        commit = exp.spec.code.commit if exp.spec.code else None
        if commit == "auto":
            commit = self._git_head(cwd, doc.source, res)
        refused = self._out_of_reach(exp, doc.source, actor, res)
        if "spec.dataset.uri" not in refused:
            self._dataset_there(exp, doc.source, res)
        if not res.problems:  # the reads submit makes, bounded as there: a FIFO, a device, 60 MB are refused alike
            if exp.spec.config and "spec.config" not in refused:
                self._config_digest(exp.spec.config, doc.source, res)
            if not exp.spec.dataset.version and "spec.dataset.uri" not in refused:
                self._dataset_version(exp.spec.dataset.uri, doc.source, res)
        parent_run = parent_ckpt = parent_team = None
        missing = False
        parent = exp.spec.parent
        if parent is not None and parent.run in together and self.store.find_run(parent.run, teams=sight.teams) is None:
            res.warnings.append(f"{exp.metadata.name} starts from {parent.run}: submit {parent.run} first")
        else:
            try:
                parent_run, parent_ckpt, parent_team = self._parent(exp, doc.source, sight)
            except SpecError as exc:
                problems += exc.problems
                missing = isinstance(exc, _MissingParentError)
        located = locate([*problems, *res.problems], doc)
        infeasible = bool(problems) and problems[0].path == _FEASIBILITY_PATH
        return Preflight(located, res.warnings, commit, parent_run, parent_ckpt, infeasible, parent_team, missing)

    def _out_of_reach(self, exp: Experiment, source: str, actor: Actor | None, res: lineage.Resolution) -> set[str]:
        """The fields naming paths `actor` may not name (control/uris.py), each a problem in `res`; nothing is
        opened to decide, so a refusal says nothing of whether the file exists."""
        from crossrail.control.uris import reach_for

        rule = reach_for(actor is not None, self.workspace_dir, self.fleet.spec.paths.roots)
        named = {"spec.dataset.uri": exp.spec.dataset.uri, "spec.checkpoint.dir": str(exp.spec.checkpoint.dir)}
        if exp.spec.config:
            named["spec.config"] = exp.spec.config
        refused = set()
        for field_path, uri in named.items():
            why = rule.refusal(uri)
            if why is not None:
                refused.add(field_path)
                fix = "name object storage, or a file under an allowed root (an admin can add one)"
                res.problems.append(
                    Problem(source, field_path, f"{uri[:200]} {why}", fix=fix, code=ProblemCode.BAD_VALUE)
                )
        return refused

    def _new_team(self, team: str | None, source: str) -> list[Problem]:
        """A team not yet known (to the fleet or by a run) is named as a DNS-1123 label; known ones keep theirs."""
        from crossrail.core import validate_team

        why = None if team is None else validate_team(team)
        if why is None or team in self.fleet.spec.teams or self.store.list_runs(team=team, limit=1):
            return []
        return [
            Problem(
                source,
                "metadata.team",
                f"a new team {why}",
                fix="name the team e.g. `ml-research`",
                code=ProblemCode.BAD_VALUE,
            )
        ]

    def _team_typo(self, team: str | None, sight: Sight) -> list[str]:
        """A warning for a team no queue, run or token names yet, spelt like one `sight` sees: its runs would go to
        the stage's shared queue and count against no team's budget, which a misspelling rarely means."""
        if team is None:
            return []
        stored = self._teams if self._teams is not None else self.store.team_names()
        known = set(self.fleet.spec.teams) | set(stored)
        if team in known:
            return []
        from crossrail.spec.problems import did_you_mean  # the spec layer loads only on this warning

        hint = did_you_mean(team, sorted(t for t in known if sight.sees(t)))
        return [] if hint is None else [f"team {team!r} is new here (no queue, run or token names it); {hint}"]

    def _feasibility(self, exp: Experiment, source: str) -> list[Problem]:
        """The fleet check (scheduling.require_feasible) as one problem on one line: each pool's reason."""
        from crossrail.errors import PlacementError
        from crossrail.scheduling import require_feasible

        try:
            require_feasible(exp, self.fleet)
        except PlacementError as exc:
            *said, fix = str(exc).splitlines()
            message = said[0] + " " + "; ".join(line.strip() for line in said[1:])
            return [Problem(source, _FEASIBILITY_PATH, message, fix=fix, code=ProblemCode.INFEASIBLE)]
        return []

    def _host_cores(self, exp: Experiment, source: str) -> list[Problem]:
        """A fleet of local pools only starts one process per data-parallel worker on this host: not more
        than its cores unless the experiment says `parallelism.oversubscribe: true`."""
        from crossrail.spec.experiment import host_cores_items
        from crossrail.spec.paths import format_path

        pools = self.fleet.pools
        if not pools or any(p.backend != "local" for p in pools):
            return []
        par = exp.spec.parallelism
        items = host_cores_items(par.data, par.oversubscribe, self.host_cores)
        return [
            Problem(source, format_path(("spec", "parallelism", *path)), why, fix=fix, code=ProblemCode.INFEASIBLE)
            for path, why, fix in items
        ]

    def _dataset_there(self, exp: Experiment, source: str, res: lineage.Resolution) -> None:
        """One bounded look at the dataset: missing is a problem; a look that cannot be made is one only when
        submit must read the data to version it (no spec.dataset.version), else a warning."""
        from crossrail.control.service.reach import reach

        uri, version = exp.spec.dataset.uri, exp.spec.dataset.version
        if uri not in self._reached:
            self._reached[uri] = reach(uri, self.reach_timeout_s)
        found = self._reached[uri]
        if found.state == "missing":
            fix = "fix the URI, or create the data before submitting"
            res.problems.append(
                Problem(source, "spec.dataset.uri", f"{uri} does not exist", fix=fix, code=ProblemCode.NOT_FOUND)
            )
        elif found.state == "unknown" and version:
            res.warnings.append(f"dataset {uri} could not be checked from here ({found.why}); it is recorded as given")
        elif found.state == "unknown":
            res.problems.append(
                Problem(
                    source,
                    "spec.dataset.uri",
                    f"{uri} could not be reached to resolve its version ({found.why})",
                    fix="give spec.dataset.version, or make the data reachable from here (credentials, gcsfs, s3fs)",
                    code=ProblemCode.NOT_FOUND,
                )
            )

    def _resolve(
        self, exp: Experiment, source: str, commit: str | None, dumped: dict[str, Any]
    ) -> tuple[dict[str, Any], lineage.Resolution]:
        """The spec a run records: `dumped` (the experiment's JSON, left as it is) with its commit and dataset
        version resolved."""
        res = lineage.Resolution(image_digest=lineage.image_digest(exp.spec.image))
        spec = {**dumped["spec"], "dataset": dict(dumped["spec"]["dataset"])}
        if spec.get("code") is not None:
            spec["code"] = dict(spec["code"])
        recorded = {**dumped, "spec": spec}
        res.code_commit = commit
        if exp.spec.dataset.version:
            res.dataset_version = exp.spec.dataset.version
        else:
            res.dataset_version = self._dataset_version(exp.spec.dataset.uri, source, res)
        if exp.spec.config:
            res.config_digest = self._config_digest(exp.spec.config, source, res)
        if res.problems:
            raise SpecError(res.problems)
        if spec.get("code") is not None:
            spec["code"]["commit"] = commit
        spec["dataset"]["version"] = res.dataset_version
        return recorded, res

    def _config_digest(self, uri: str, source: str, res: lineage.Resolution) -> str | None:
        if uri not in self._configs:
            try:
                self._configs[uri] = lineage.config_digest(uri, self.input_limits)
            except (OSError, ImportError, ValueError, lineage.InputRefused) as exc:
                self._configs[uri] = exc
        digest = self._configs[uri]
        if isinstance(digest, lineage.InputRefused):
            res.problems.append(
                Problem(source, "spec.config", digest.message, fix=digest.fix, code=ProblemCode.BAD_VALUE)
            )
            return None
        if isinstance(digest, BaseException):
            res.warnings.append(f"config {uri} could not be read here ({_short(digest)}); its digest is not recorded")
            return None
        return digest

    def _git_head(self, cwd: Path, source: str, res: lineage.Resolution) -> str | None:
        key = self._resolved.get(cwd)
        if key is None:
            key = self._resolved[cwd] = cwd.resolve()
        if key not in self._git:
            self._git[key] = lineage.git_head(key)
        commit, dirty, error = self._git[key]
        if commit is None and self.policy.portability.code_commit == "required":
            res.problems.append(
                Problem(
                    source,
                    "spec.code.commit",
                    f"is 'auto' but {key} {error} (the placement policy has code_commit: required)",
                    fix=(
                        "submit from a checkout of the training code that has a commit, "
                        "or set spec.code.commit to a commit id"
                    ),
                    code=ProblemCode.BAD_VALUE,
                )
            )
        elif commit is None:
            res.warnings.append(
                f"spec.code.commit is 'auto' but {key} {error}: the run records no commit "
                "(set spec.code.commit, or portability_requirements.code_commit: required to refuse this)"
            )
        elif dirty:
            res.warnings.append(
                f"the checkout at {key} has uncommitted changes; commit {commit[:12]} does not reproduce them"
            )
        return commit

    def _dataset_version(self, uri: str, source: str, res: lineage.Resolution) -> str | None:
        if uri not in self._datasets:
            try:
                self._datasets[uri] = lineage.dataset_version(uri, self.input_limits)
            except lineage.InputRefused as exc:
                res.problems.append(
                    Problem(source, "spec.dataset.uri", exc.message, fix=exc.fix, code=ProblemCode.BAD_VALUE)
                )
                return None
            except FileNotFoundError:
                res.problems.append(
                    Problem(
                        source,
                        "spec.dataset.uri",
                        f"{uri} does not exist",
                        fix="fix the URI, or give spec.dataset.version",
                        code=ProblemCode.NOT_FOUND,
                    )
                )
                return None
            except (OSError, ImportError, ValueError) as exc:
                res.problems.append(
                    Problem(
                        source,
                        "spec.dataset.version",
                        f"is not given and {uri} could not be read to resolve it ({_short(exc)})",
                        fix="give spec.dataset.version, or install the filesystem for this scheme (e.g. gcsfs, s3fs)",
                        code=ProblemCode.NOT_FOUND,
                    )
                )
                return None
        return self._datasets[uri]

    def _parent(
        self, exp: Experiment, source: str, sight: Sight = EVERYONE
    ) -> tuple[str | None, str | None, str | None]:
        """(run id, checkpoint, team) of the parent `exp` names, as `sight` sees runs; a parent of another team is
        taken only where that team shares with the experiment's (`spec.sharing` of the fleet)."""
        from crossrail.control import parents

        parent = exp.spec.parent
        if parent is None:
            return None, None, None
        run = self.find(parent.run, sight)
        if run is None:
            from crossrail.spec.problems import did_you_mean

            close = did_you_mean(parent.run, self.store.run_names(teams=sight.teams))  # only runs `sight` sees
            fix = "submit the parent first, or name an existing run id"
            missing = Problem(
                source,
                "spec.parent.run",
                f"no run or experiment named {parent.run!r}",
                fix=fix,
                code=ProblemCode.NOT_FOUND,
            )
            raise _MissingParentError([replace(missing, fix=f"{close[:-1]}, or {fix}") if close else missing])
        refusal = self.unshared(run, exp.metadata.team)
        if refusal is not None:
            raise SpecError(
                [Problem(source, "spec.parent.run", refusal[0], fix=refusal[1], code=ProblemCode.BAD_VALUE)]
            )
        if parent.checkpoint == "latest":
            return run.id, self._parent_latest(run, source), run.team
        match = next((c for c in self.store.checkpoints(run.id) if c.step == parent.checkpoint), None)
        why = None if match is None else parents.why_unusable(match)
        if match is None or why is not None:
            problem = (
                f"run {run.id} has no checkpoint at step {parent.checkpoint}"
                if match is None
                else f"the checkpoint of step {parent.checkpoint} of run {run.id} {why}"
            )
            steps = ", ".join(map(str, parents.usable_steps(self.store, run.id))) or "none"
            fix = "name one of the usable steps, or 'latest'" if steps != "none" else "name another parent run"
            raise SpecError(
                [
                    Problem(
                        source,
                        "spec.parent.checkpoint",
                        f"{problem} (usable steps: {steps})",
                        fix=fix,
                        code=ProblemCode.NOT_FOUND,
                    )
                ]
            )
        return run.id, match.uri, run.team

    def unshared(self, parent: RunRecord, team: str | None) -> tuple[str, str] | None:
        """(what, fix) when a run of `team` may not start from `parent`: its team is another that does not
        share with `team` by the fleet's `spec.sharing`; None when it may."""
        if parent.team is None or team is None or parent.team == team or self.fleet.shares(parent.team, team):
            return None
        return (
            f"run {parent.id} belongs to team {parent.team}, which does not share its checkpoints with team {team}",
            f"an admin adds `- {{from: {parent.team}, to: [{team}]}}` under spec.sharing in the fleet "
            "(`crossrail fleet apply`), or name a parent of your own team",
        )

    def _parent_latest(self, run: RunRecord, source: str) -> str:
        """`latest` of a parent that has ended: its newest checkpoint that verifies. Of one still queued or
        running: `latest`, resolved when the child's attempt launches (control/agent/loop.py)."""
        from crossrail.control import parents

        if not parents.ended(run):
            return "latest"
        verified = parents.newest_verified(self.store, run.id)
        if verified.newest is None:
            raise SpecError(
                [
                    Problem(
                        source,
                        "spec.parent.run",
                        parents.no_usable_checkpoint(run, verified),
                        fix=f"run the parent again (`crossrail resubmit {run.id}`), or name another parent",
                        code=ProblemCode.NOT_FOUND,
                    )
                ]
            )
        return verified.newest.uri


def _short(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:200]
