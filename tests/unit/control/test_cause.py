"""The cause line status and show give a failed attempt: the last exception, else the last error line."""

from __future__ import annotations

import pytest

from crossrail.control.agent.cause import MAX_CHARS, cause_line

TRACEBACK = """step 1/200  loss 5.5  tokens/s 80
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    raise KeyError("n_layers")
KeyError: 'n_layers'
"""


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        pytest.param(TRACEBACK, "KeyError: 'n_layers'", id="a-traceback-gives-its-exception-line"),
        pytest.param(
            "step 3/10  loss 2.0\ncrossrail.workloads.gpt: model.n_layers is not a model setting; did you mean "
            "n_layer?\n",
            "crossrail.workloads.gpt: model.n_layers is not a model setting; did you mean n_layer?",
            id="a-workload-error-message",
        ),
        pytest.param("step 1/10  loss 2.0\nstep 2/10  loss 1.9\n", None, id="progress-only-says-nothing"),
        pytest.param("", None, id="an-empty-log"),
    ],
)
def test_the_cause_line_of_a_log(log: str, cause: str | None) -> None:
    assert cause_line(log) == cause


def test_a_long_cause_is_cut_to_a_line_a_table_can_show() -> None:
    found = cause_line("ValueError: " + "x" * 1000)
    assert found is not None
    assert len(found) == MAX_CHARS
