"""Optional extras are imported when first used, and a missing one says which `pip install` adds it; the runtime
and the CLI's submit and status need neither matplotlib nor scipy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from crossrail.core.events import Event, EventType
from crossrail.errors import MissingExtraError

BLOCK = """
import sys

class _Uninstalled:
    '''Packages this process behaves as if they were not installed.'''

    names = {names!r}

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Uninstalled())
"""


def uninstalled(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """Make `modules` unimportable in this process for the test (a None in sys.modules: import raises)."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def _scaling_fit() -> object:
    from crossrail.metrics.scaling_fit import fit

    return fit("amdahl", [1, 2, 4], [1.0, 1.9, 3.5])


def _max_min_policy() -> object:
    from crossrail.scheduling.policies import get_policy

    return get_policy("max_min_fairness")


def _report_figure() -> object:
    from crossrail.control.reports.figures import _png

    return _png("t", lambda ax: None)


def _sweep_figure() -> object:
    from crossrail.control.reports.sweep_figure import fit_png

    return fit_png({"pools": []})


def _simulation_plot(tmp_path: Path) -> object:
    from crossrail.sim.report import plot

    return plot([], tmp_path / "p.png")


def _prometheus_registry() -> object:
    from crossrail.control.reports.prometheus import registry_for

    return registry_for(object(), object())


def _prometheus_families() -> object:
    from crossrail.control.reports.prometheus import FleetCounters

    return list(FleetCounters().families(0.0, queues=["q"]))


def _agent_metrics_port() -> object:
    from crossrail.api.prom import serve_metrics

    return serve_metrics(object(), "127.0.0.1", 0)  # type: ignore[arg-type]  # refused before the client is read


def _postgres_store() -> object:
    from crossrail.store import Store

    return Store.open("postgresql+psycopg://crossrail@127.0.0.1:9/crossrail")


@pytest.mark.parametrize(
    ("missing", "use", "extra", "said"),
    [
        pytest.param(("scipy", "scipy.optimize"), _scaling_fit, "reports", "scaling fits", id="a scaling fit: scipy"),
        pytest.param(("scipy", "scipy.optimize"), _max_min_policy, "sim", "max-min", id="a max-min policy: scipy"),
        pytest.param(("matplotlib",), _report_figure, "reports", "figures", id="a report figure: matplotlib"),
        pytest.param(("matplotlib",), _sweep_figure, "reports", "scaling fit", id="a sweep's fit figure: matplotlib"),
        pytest.param(("prometheus_client", "prometheus_client.registry"), _prometheus_registry, "api", "Prometheus",
                     id="the /metrics registry: prometheus-client"),
        pytest.param(("prometheus_client", "prometheus_client.core"), _prometheus_families, "api", "Prometheus",
                     id="a scrape's metric families: prometheus-client"),
        pytest.param(("prometheus_client",), _agent_metrics_port, "api", "metrics port",
                     id="the agent's metrics port: prometheus-client"),
        pytest.param(("psycopg",), _postgres_store, "postgres", r"psycopg:// store needs its driver psycopg",
                     id="a PostgreSQL store: psycopg"),
    ],
)  # fmt: skip
def test_a_missing_extra_says_what_needed_it_and_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...], use: Callable[[], object], extra: str, said: str
) -> None:
    uninstalled(monkeypatch, *missing)
    with pytest.raises(MissingExtraError, match=said) as err:
        use()
    assert f"pip install 'crossrail[{extra}]'" in str(err.value)
    assert isinstance(err.value, ImportError)  # what a caller that falls back on ImportError catches
    assert err.value.exit_code == 2


def test_a_simulations_plot_without_matplotlib_names_the_sim_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    uninstalled(monkeypatch, "matplotlib", "matplotlib.pyplot")
    with pytest.raises(MissingExtraError, match=r"pip install 'crossrail\[sim\]'"):
        _simulation_plot(tmp_path)
    assert not (tmp_path / "p.png").exists()


def test_the_pure_fold_of_the_prometheus_metrics_needs_no_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    uninstalled(monkeypatch, "prometheus_client", "prometheus_client.core", "prometheus_client.registry")
    from crossrail.control.reports.prometheus import FleetCounters

    counters = FleetCounters()
    counters.add(Event(EventType.SUBMITTED, 1.0, run="r1", data={"queue": "q"}, seq=1))
    assert counters.runs


def _run(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    program = textwrap.dedent(BLOCK.format(names={"matplotlib", "scipy"})) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", program, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_runtime_imports_and_says_why_without_matplotlib_and_scipy(tmp_path: Path) -> None:
    done = _run(
        """
        import crossrail.runtime
        from crossrail.errors import MissingExtraError
        from crossrail.metrics.scaling_fit import fit
        try:
            fit("amdahl", [1, 2], [1.0, 2.0])
        except MissingExtraError as exc:
            print("hint:", exc)
        print("loaded:", sorted(m for m in sys.modules if m.partition(".")[0] in ("matplotlib", "scipy")))
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "hint: scaling fits needs scipy, " in done.stdout  # the blocker works: scipy is not there
    assert "loaded: []" in done.stdout


def test_submit_and_status_work_without_matplotlib_and_scipy(checkout: Path) -> None:
    cli = """
        import runpy
        sys.argv = ["crossrail", *sys.argv[1:]]
        runpy.run_module("crossrail.cli", run_name="__main__")
        """
    submitted = _run(cli, checkout, "submit", ".crossrail/experiments/eval-smoke.yaml", "--json")
    assert submitted.returncode == 0, submitted.stderr
    status = _run(cli, checkout, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert '"apiVersion": "crossrail/v1"' in status.stdout
    assert "eval-smoke" in status.stdout
