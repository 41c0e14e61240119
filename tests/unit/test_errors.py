"""The exception tree: every exception crossrail defines derives from CrossrailError and is drawn, under its own
base, in the docstring of crossrail.errors; the few that are not are named here with why."""

from __future__ import annotations

import importlib
import pkgutil
import re

import pytest

import crossrail
from crossrail import errors
from crossrail.errors import CrossrailError

NOT_CROSSRAIL_ERRORS = {
    "crossrail.executors.kubernetes.NotFound": "the Kubernetes API's 404, raised and caught inside the executor",
    "crossrail.executors.kubernetes.AlreadyExists": "the Kubernetes API's 409, raised and caught inside the executor",
    "crossrail.scheduling.gavel._BadCell": "one malformed cell of a throughput matrix, caught where the matrix is read",
    "crossrail.spec.common.FieldErrors": "a model validator's problems: pydantic wants a ValueError",
    "crossrail.spec.compose._Abort": "a document past a limit: stops the reader, which reports the SpecError",
    "crossrail.workloads.rl.stages.Stopped": "SIGTERM or the learner's end: control flow that ends a stage's loop",
}
"""Exceptions of crossrail that are not crossrail errors: none leaves the module that raises it."""

NOT_IMPORTED = ("crossrail.store.migrations.env",)
"""Alembic's environment script, which only runs under `alembic` (it reads alembic.context.config)."""

_NODE = re.compile(r"^    (?P<rails>(?:[│ ]   )*)(?:├── |└── )(?P<name>\w+)")


def drawn_tree() -> dict[str, str | None]:
    """Each class drawn in crossrail.errors's docstring and the class drawn above it (None: the root)."""
    doc = errors.__doc__ or ""
    tree: dict[str, str | None] = {"CrossrailError": None}
    above: list[str] = ["CrossrailError"]
    for line in doc.splitlines():
        node = _NODE.match(line)
        if node is None:
            continue
        depth = len(node["rails"]) // 4 + 1
        del above[depth:]
        tree[node["name"]] = above[depth - 1]
        above.append(node["name"])
    return tree


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined at the top level of a module of crossrail, by its qualified name."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(crossrail.__path__, "crossrail."):
        if info.name.endswith("__main__") or info.name in NOT_IMPORTED:
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == info.name:
                found[f"{info.name}.{value.__qualname__}"] = value
    return found


@pytest.fixture(scope="module")
def classes() -> dict[str, type[BaseException]]:
    return exception_classes()


def test_every_exception_of_crossrail_is_a_crossrail_error_but_the_named_few(
    classes: dict[str, type[BaseException]],
) -> None:
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, CrossrailError))
    assert outside == sorted(NOT_CROSSRAIL_ERRORS), "derive them from CrossrailError, or name them here with why"


def test_the_drawing_names_every_public_crossrail_error_and_nothing_else(
    classes: dict[str, type[BaseException]],
) -> None:
    public = sorted(
        cls.__name__ for cls in classes.values() if issubclass(cls, CrossrailError) and not cls.__name__.startswith("_")
    )
    assert sorted(drawn_tree()) == public


def test_each_drawn_error_derives_from_the_one_drawn_above_it(classes: dict[str, type[BaseException]]) -> None:
    by_name = {cls.__name__: cls for cls in classes.values()}
    wrong = [
        f"{name} is drawn under {parent} but its bases are {[b.__name__ for b in by_name[name].__bases__]}"
        for name, parent in drawn_tree().items()
        if parent is not None and by_name[parent] not in by_name[name].__bases__
    ]
    assert not wrong


def test_no_two_exceptions_of_crossrail_share_a_name(classes: dict[str, type[BaseException]]) -> None:
    names = [name.rsplit(".", 1)[1] for name in classes]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_the_drawing_is_read_as_drawn() -> None:
    tree = drawn_tree()
    assert tree["UsageError"] == "CrossrailError"
    assert tree["InfeasibleError"] == "PlacementError"
    assert tree["TornCheckpoint"] == "InvalidCheckpoint"
    assert tree["ForeignCheckpoint"] == "CheckpointError"
    assert tree["InternalError"] == "CrossrailError"


def test_permanent_error_is_still_importable_and_says_what_to_use() -> None:
    with pytest.warns(DeprecationWarning, match="use ExecutionError"):
        from crossrail.errors import PermanentError
    assert PermanentError is errors.ExecutionError
    with pytest.raises(AttributeError, match="NoSuchError"):
        errors.NoSuchError  # noqa: B018


@pytest.mark.parametrize(
    ("cls", "exit_code", "status"),
    [
        pytest.param(errors.UnauthenticatedError, 1, 401, id="a missing ingest secret is the one 401 error"),
        pytest.param(errors.InputRefused, 1, 400, id="a refused input keeps exit 1 and 400"),
        pytest.param(errors.MissingExtraError, 2, 400, id="a missing extra is a usage error"),
        pytest.param(errors.InternalError, 1, 400, id="a server failure is answered as 500 by its own handler"),
    ],
)
def test_the_errors_moved_onto_the_tree_keep_their_exit_codes_and_statuses(
    cls: type[CrossrailError], exit_code: int, status: int
) -> None:
    from crossrail.api.errors import status_of

    exc = cls("m", "fix") if cls is errors.InputRefused else cls("m")
    assert exc.exit_code == exit_code
    assert status_of(exc) == status


def test_old_import_paths_still_name_the_same_classes() -> None:
    from crossrail.api.errors import InternalError
    from crossrail.control.service.lineage import InputRefused

    assert InputRefused is errors.InputRefused
    assert InternalError is errors.InternalError
    from crossrail.api import errors as api_errors

    assert not hasattr(api_errors, "Unauthorized")  # one 401 error: UnauthenticatedError


def test_a_missing_extra_is_also_an_import_error_so_fallbacks_still_catch_it() -> None:
    exc = errors.MissingExtraError("x needs y: pip install 'crossrail[z]'", name="y")
    assert isinstance(exc, ImportError)
    assert isinstance(exc, errors.UsageError)
    assert exc.name == "y"
    assert str(exc) == "x needs y: pip install 'crossrail[z]'"


@pytest.mark.parametrize(
    "name",
    [
        "CheckpointError",
        "CheckpointNotFound",
        "InvalidCheckpoint",
        "TornCheckpoint",
        "NewerFormat",
        "ForeignCheckpoint",
        "ContextError",
    ],
)
def test_the_runtime_exports_the_drawn_checkpoint_and_context_errors_under_their_names(name: str) -> None:
    import crossrail.runtime

    assert getattr(crossrail.runtime, name) is getattr(errors, name)
    assert getattr(errors, name).__module__ == "crossrail.errors"
