"""The exception tree of crossrail.

    CrossrailError                  everything crossrail raises on purpose
    ├── UsageError                  the command line or a call was malformed (CLI exit 2)
    │   └── MissingExtraError       an optional extra is not installed; names its `pip install` (also an ImportError)
    ├── SpecError                   a file or document is invalid; carries every Problem found (exit 1)
    ├── PlacementError              no pool of the fleet could ever hold a request (exit 1)
    │   └── InfeasibleError         ... said as the Problems of the document that asked (also a SpecError)
    ├── InputRefused                an input submit will not read: not a regular file, a system path, past a budget
    ├── AccessError                 who asked may not do what was asked
    │   ├── UnauthenticatedError    no token, or one that is unknown, expired, revoked or rotated out (401)
    │   └── ForbiddenError          the token's role or team does not allow it (403)
    ├── WorkspaceError              no workspace, or one that cannot be read or written
    │   └── AgentRunningError       another agent holds the workspace's lock
    ├── StoreError                  the state store failed or refused an operation
    │   ├── NotFoundError           a run, experiment or attempt does not exist
    │   ├── ConflictError           the operation does not apply to the object's current state
    │   ├── StoreUnavailableError   the store cannot be reached now (server down); retrying may succeed
    │   ├── StoreDamagedError       the store is corrupt, deleted or replaced: stop writing, restore a backup
    │   └── FencedError             an agent's write carried a leader term that a newer one replaced: it steps down
    ├── ExecutionError              running work failed
    │   └── RetryableError          a failure that another attempt may not meet (preemption, lost host)
    ├── CheckpointError             a checkpoint cannot be written, found or read
    │   ├── CheckpointNotFound      no checkpoint, or no valid one, where one was asked for
    │   ├── InvalidCheckpoint       a committed checkpoint this reader cannot use
    │   │   ├── TornCheckpoint      ... incomplete or damaged: no manifest, a missing file, a checksum mismatch
    │   │   └── NewerFormat         ... of a newer major format; a newer crossrail reads it
    │   └── ForeignCheckpoint       another run's, not its declared parent's
    ├── ContextError                the environment lacks or garbles the variables crossrail sets (exit 2)
    └── InternalError               the API server itself failed (500); its log has the traceback

Every class is defined here; crossrail.runtime exports the checkpoint and context errors a training process
meets under the same names. tests/unit/test_errors.py checks that this drawing and the classes agree.

Every error's message says what is wrong, where, and how to fix it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ProblemCode(StrEnum):
    """What kind of finding a Problem is, for programs to act on (its message is for people); stable."""

    YAML_SYNTAX = "yaml_syntax"
    """The text is not valid YAML."""
    BAD_YAML = "bad_yaml"
    """YAML crossrail does not read: a tag, an alias, a repeated or non-text key, past a size or depth limit."""
    UNKNOWN_FIELD = "unknown_field"
    MISSING_FIELD = "missing_field"
    WRONG_TYPE = "wrong_type"
    """A value of the wrong type: text where a number belongs, a mapping where a list does."""
    BAD_VALUE = "bad_value"
    """A value of the right type that the schema or a check across fields refuses."""
    HARD_CODED = "hard_coded"
    """Hardware written into a portable experiment (node labels, device visibility, a backend)."""
    PORTABILITY = "portability"
    """Anything else the portability and reproducibility lint finds (an unpinned image, a local path, ...)."""
    NOT_FOUND = "not_found"
    """Something the document names does not exist or cannot be read: a dataset URI, a parent run, a checkpoint
    step, a file."""
    INFEASIBLE = "infeasible"
    """Valid, but the fleet cannot run it: no pool can hold it, no queue takes its stage."""
    UNSUPPORTED = "unsupported"
    """Valid, but where it is going cannot carry it: a Kubernetes manifest, a Kueue object, the simulator."""
    INVALID = "invalid"
    """Any other problem."""


@dataclass(frozen=True)
class Problem:
    """One finding in a document: where it is and how to fix it."""

    source: str
    path: str
    message: str
    line: int | None = None
    fix: str | None = None
    # The `--set path=value` argument the problem's value came from, cited instead of a line.
    argument: str | None = None
    code: ProblemCode = ProblemCode.INVALID
    """What kind of problem it is, set where it is found: classify problems by it, never by their message."""

    def render(self) -> str:
        where = self.path or "(document)"
        if self.argument is not None:
            where += f" (--set {self.argument})"
        elif self.line is not None:
            where += f" (line {self.line})"
        text = f"{where}: {self.message}"
        if self.fix and self.fix not in self.message:
            text += f"; {self.fix}"
        return text

    def as_dict(self) -> dict[str, object]:
        return {
            "file": self.source,
            "line": self.line,
            "path": self.path,
            "message": self.message,
            "fix": self.fix,
            "set": self.argument,
            "code": str(self.code),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Problem:
        """A problem as `as_dict` wrote it; one without a code, or with a code this crossrail does not know (a
        newer server's), is `invalid`."""
        try:
            code = ProblemCode(d.get("code") or ProblemCode.INVALID)
        except ValueError:
            code = ProblemCode.INVALID
        return cls(
            source=d.get("file") or "",
            path=d.get("path") or "",
            message=d.get("message") or "",
            line=d.get("line"),
            fix=d.get("fix"),
            argument=d.get("set"),
            code=code,
        )


class CrossrailError(Exception):
    """Base of every error crossrail raises on purpose."""

    exit_code = 1


class UsageError(CrossrailError):
    exit_code = 2


class SpecError(CrossrailError):
    """One or more problems in one or more documents, gathered before failing."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        by_source: dict[str, list[Problem]] = {}
        for p in self.problems:
            by_source.setdefault(p.source, []).append(p)
        lines: list[str] = []
        for source, items in by_source.items():
            noun = "problem" if len(items) == 1 else "problems"
            lines.append(f"crossrail: {len(items)} {noun} in {source}")
            lines.extend(f"  {p.render()}" for p in items)
        return "\n".join(lines)


class PlacementError(CrossrailError):
    pass


class InfeasibleError(SpecError, PlacementError):
    """No pool could ever hold an experiment, with its file, line and fix (and any other problems found)."""


class AccessError(CrossrailError):
    pass


class UnauthenticatedError(AccessError):
    pass


class ForbiddenError(AccessError):
    pass


class WorkspaceError(CrossrailError):
    pass


class AgentRunningError(WorkspaceError):
    """Another agent holds the workspace's lock."""


class StoreError(CrossrailError):
    pass


class NotFoundError(StoreError):
    pass


class ConflictError(StoreError):
    pass


class StoreUnavailableError(StoreError):
    pass


class StoreDamagedError(StoreError):
    pass


class FencedError(StoreError):
    """A write by an agent that no longer leads: a newer fencing term holds the lease; nothing was written."""


class ExecutionError(CrossrailError):
    pass


class RetryableError(ExecutionError):
    pass


class InputRefused(CrossrailError):
    """An input submit will not read: not a regular file, under a system path, or past its budget.

    `message` says what is wrong with the input; `fix` how to get past it. The caller names the field.
    """

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


class MissingExtraError(UsageError, ImportError):
    """An optional extra is not installed: the message says what needed it and which `pip install` adds it.

    Also an ImportError, so code that falls back when an import fails goes on doing so.
    """


class CheckpointError(CrossrailError):
    """A checkpoint cannot be written, found or read; the message names the problem and what to use instead."""


class CheckpointNotFound(CheckpointError):
    """No checkpoint, or no valid one, where one was asked for."""


class InvalidCheckpoint(CheckpointError):
    """A committed checkpoint this reader cannot use: torn, or from a newer major format."""


class TornCheckpoint(InvalidCheckpoint):
    """A checkpoint that is incomplete or damaged: no manifest, a missing file, a checksum mismatch, ..."""


class NewerFormat(InvalidCheckpoint):
    """A checkpoint of a newer major format than this reader's; a newer crossrail reads it."""


class ForeignCheckpoint(CheckpointError):
    """A checkpoint of another run than the one restoring it, which is not that run's declared parent either."""


LAUNCHED_BY = (
    "this process must be launched by crossrail, which sets every one of these variables, "
    "or they must be set by hand (see docs/runtime.md)"
)


class ContextError(CrossrailError):
    """The environment lacks or garbles variables crossrail sets; lists every one at once."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        noun = "problem" if len(problems) == 1 else "problems"
        lines = [f"crossrail: {len(problems)} {noun} in the environment of this process"]
        lines += [f"  {p}" for p in problems]
        lines.append(LAUNCHED_BY)
        super().__init__("\n".join(lines))


class InternalError(CrossrailError):
    """A failure of the API server itself: its log has the traceback, the answer does not."""


_DEPRECATED = {"PermanentError": ("ExecutionError", ExecutionError)}
"""Old names kept importable: name -> (what to use instead, the class)."""


def __getattr__(name: str) -> type[CrossrailError]:
    if name in _DEPRECATED:
        instead, cls = _DEPRECATED[name]
        warnings.warn(
            f"crossrail.errors.{name} is deprecated (nothing raised it); use {instead}",
            DeprecationWarning,
            stacklevel=2,
        )
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
