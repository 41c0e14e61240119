"""No 500s: the hostile parameters and bodies that made the server fail answer in the one error shape instead.

Each request goes through the whole app in process (auth middleware included) over a small fresh workspace.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from tests.security.ingesting import admitted, call

from crossrail.api import create_app
from crossrail.client import Client
from crossrail.control.agent import channel
from crossrail.control.agent.secrets import attempt_secret
from crossrail.core import ManualClock

CLOCK = ManualClock()
HUGE = 10**30  # past 64 bits: SQLite refuses to bind it


def is_error_shape(answer: httpx.Response, status: int) -> bool:
    """Whether `answer` is the documented error (docs/api.md#errors) with this status."""
    body = answer.json()
    return (
        answer.status_code == status
        and body["apiVersion"] == "crossrail/v1"
        and body["kind"] == "Error"
        and body["status"] == status
        and isinstance(body["error"], str)
        and isinstance(body["message"], str)
        and isinstance(body["problems"], list)
    )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("no500")
    Client.init(root)
    return root / ".crossrail"


@pytest.fixture(scope="module")
def app(home: Path) -> Iterator[FastAPI]:
    app = create_app(home, clock=CLOCK)
    yield app
    app.state.client.close()


def test_checkpoint_step_of_a_non_ascii_digit_is_a_400_not_a_500(app: FastAPI, home: Path) -> None:
    run = admitted(home, "digits", str(home / "reports" / "{run}" / "1.jsonl"), CLOCK)
    for step in ("%C2%B2", "%D9%A1", "%EF%BC%91"):  # ², Arabic-Indic one, fullwidth one: str.isdigit says yes
        answer = call(app, "GET", f"/v1/runs/{run}/checkpoints/{step}")
        assert is_error_shape(answer, 400), answer.text
        assert "neither a number nor `latest`" in answer.json()["message"]
    beyond = call(app, "GET", f"/v1/runs/{run}/checkpoints/{HUGE}")
    assert is_error_shape(beyond, 400), beyond.text
    assert call(app, "GET", f"/v1/runs/{run}/checkpoints/7").status_code == 404  # a real number still asks


def test_events_after_beyond_63_bits_is_a_422_not_a_500(app: FastAPI) -> None:
    answer = call(app, "GET", "/v1/events", params={"after": "99999999999999999999999"})
    assert is_error_shape(answer, 422), answer.text
    assert answer.json()["problems"][0]["path"] == "after"
    assert call(app, "GET", "/v1/events", params={"after": str(2**63 - 1)}).json()["events"] == []
    for name, value in (("after", "²"), ("limit", "١٠")):  # non-ASCII digits are not numbers either
        assert is_error_shape(call(app, "GET", "/v1/events", params={name: value}), 422)


def test_ingest_step_or_seq_of_ten_to_the_thirty_is_refused_not_a_500(app: FastAPI, home: Path) -> None:
    run = admitted(home, "huge", "http://testserver/v1/ingest/{run}/1", CLOCK)
    auth = {"Authorization": f"Bearer {attempt_secret(home, run, 1)}"}
    incarnation = int(CLOCK.now() * 1000)

    def record(seq: int, step: int) -> dict[str, Any]:
        return {"v": 1, "ts": CLOCK.now(), "run": run, "attempt": 1, "type": "metric", "seq": seq} | {
            "name": "loss",
            "value": 1.5,
            "step": step,
        }

    url = f"/v1/ingest/{run}/1"
    by_seq = call(app, "POST", url, headers=auth, json={"incarnation": incarnation, "records": [record(HUGE, 1)]})
    assert is_error_shape(by_seq, 422), by_seq.text
    assert by_seq.json()["problems"][0]["path"] == "records[0].seq"

    # A step the store cannot hold makes the record an `invalid` report, as a malformed line does; the good
    # record beside it is stored.
    batch = {"incarnation": incarnation, "records": [record(1, HUGE), record(2, 3)]}
    by_step = call(app, "POST", url, headers=auth, json=batch)
    assert by_step.status_code == 200, by_step.text
    assert by_step.json()["stored"] == 2
    shown = call(app, "GET", f"/v1/runs/{run}")
    assert shown.status_code == 200, shown.text
    with Client(home, clock=CLOCK) as c:
        assert [s["step"] for s in c.service.store.metric_samples(run, "loss")] == [3]


def test_file_reports_with_a_step_of_ten_to_the_thirty_do_not_stop_the_agent(home: Path) -> None:
    run = admitted(home, "huge-file", str(home / "reports" / "{run}" / "1.jsonl"), CLOCK)
    with Client(home, clock=CLOCK) as c:
        att = c.service.store.attempts(run)[0]
        path = Path(att.report_uri or "")
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [
            {"v": 1, "ts": CLOCK.now(), "run": run, "attempt": 1, "type": "metric", "name": "loss", "value": 2.0}
            | {"step": step}
            for step in (HUGE, 4)
        ]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        channel.ingest(c.service.store, att, CLOCK.now())  # the agent's pass: it raised OverflowError
        assert [s["step"] for s in c.service.store.metric_samples(run, "loss")] == [4]


def test_fleet_put_with_a_300_character_or_nul_source_is_answered_not_a_500(app: FastAPI, home: Path) -> None:
    document = (home / "fleet.yaml").read_text()
    long = call(app, "PUT", "/v1/fleet", json={"document": document, "source": "f" * 300 + ".yaml"})
    assert long.status_code == 200, long.text  # a source too long for a file name is still named in problems
    assert long.json()["kind"] == "FleetChange"
    nul = call(app, "PUT", "/v1/fleet", json={"document": document, "source": "fleet\x00.yaml"})
    assert is_error_shape(nul, 422), nul.text
    assert nul.json()["problems"][0]["path"] == "source"
    huge = call(app, "PUT", "/v1/fleet", json={"document": document, "source": "f" * 5000})
    assert is_error_shape(huge, 422), huge.text


def test_deeply_nested_json_gets_the_documented_error_shape(app: FastAPI) -> None:
    for depth in (101, 100_000):
        body = b'{"document": ' + b"[" * depth + b"]" * depth + b"}"
        answer = call(app, "POST", "/v1/place", content=body, headers={"content-type": "application/json"})
        assert is_error_shape(answer, 400), answer.text
        assert "nested" in answer.json()["message"]
    unclosed = call(app, "POST", "/v1/place", content=b"[" * 50_000, headers={"content-type": "application/json"})
    assert is_error_shape(unclosed, 400), unclosed.text
    # Brackets inside strings are text, not nesting: a spec document's own limit answers a nested document.
    text = json.dumps({"document": "[" * 5000})
    assert call(app, "POST", "/v1/place", content=text, headers={"content-type": "application/json"}).status_code == 422


def test_unknown_paths_and_methods_answer_in_the_documented_error_shape(app: FastAPI) -> None:
    assert is_error_shape(call(app, "GET", "/v1/no-such-thing"), 404)
    wrong = call(app, "DELETE", "/v1/runs")
    assert is_error_shape(wrong, 405)
    assert wrong.headers["allow"]  # which methods the path takes


def test_reservation_with_a_duration_past_a_float_is_a_400_not_a_500(app: FastAPI) -> None:
    body = {"pool": "tpu-v5p", "chips": 4, "start": "now", "duration": "1e308s"}
    answer = call(app, "POST", "/v1/fleet/reservations", json=body)
    assert is_error_shape(answer, 400), answer.text
    assert "not a duration" in answer.json()["message"]
    assert call(app, "GET", "/v1/fleet/reservations").json()["reservations"] == []  # nothing was written


@pytest.mark.parametrize(
    ("field", "value"), [("start", "tomorrow"), ("start", "2026-12-01T00:00:00"), ("duration", "soon")]
)
def test_reservation_errors_over_http_name_the_fields_of_the_request_not_cli_flags(
    app: FastAPI, field: str, value: str
) -> None:
    body = {"pool": "tpu-v5p", "chips": 4, "start": "now", "duration": "1h"} | {field: value}
    answer = call(app, "POST", "/v1/fleet/reservations", json=body)
    assert is_error_shape(answer, 400), answer.text
    assert answer.json()["message"].startswith(field)
    assert "--" not in answer.json()["message"]


def test_the_openapi_document_states_the_bounds_and_the_one_error_shape(app: FastAPI) -> None:
    doc = call(app, "GET", "/v1/openapi.json").json()

    def param(path: str, name: str) -> dict[str, Any]:
        return next(p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == name)

    assert param("/v1/events", "after")["schema"]["maximum"] == 2**63 - 1
    assert param("/v1/runs/{ref}", "ref")["schema"]["maxLength"] == 256
    incarnation = doc["components"]["schemas"]["Batch"]["properties"]["incarnation"]
    assert (incarnation["minimum"], incarnation["maximum"]) == (0, 2**63 - 1)
    error = {"$ref": "#/components/schemas/Error"}
    assert doc["paths"]["/v1/runs"]["post"]["responses"]["422"]["content"]["application/json"]["schema"] == error
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # FastAPI's `detail` shape is never sent


@pytest.mark.slow
def test_cli_options_past_63_bits_are_usage_errors_not_tracebacks(home: Path) -> None:
    from typer.testing import CliRunner

    from crossrail.cli.app import app as cli

    for args in (["events", "--after", str(HUGE)], ["events", "--limit", str(HUGE)], ["queue", "--offset", str(HUGE)]):
        result = CliRunner().invoke(cli, [*args, "--home", str(home)], env={"CROSSRAIL_SERVER": "", "COLUMNS": "200"})
        assert result.exit_code == 2, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert "9223372036854775807" in result.output


def test_ingest_with_a_non_ascii_token_is_a_401_not_a_500(app: FastAPI, home: Path) -> None:
    run = admitted(home, "latin", "http://testserver/v1/ingest/{run}/1", CLOCK)
    batch = {"incarnation": int(CLOCK.now() * 1000), "records": []}
    for token in ("Bearer \xff\xfe".encode("latin-1"), "Bearer ²".encode("latin-1")):
        answer = call(app, "POST", f"/v1/ingest/{run}/1", headers={"Authorization": token}, json=batch)
        assert is_error_shape(answer, 401), answer.text


def test_fleet_put_with_a_pool_of_ten_to_the_thirty_chips_is_a_422_not_a_500(app: FastAPI, home: Path) -> None:
    import yaml

    fleet = yaml.safe_load((home / "fleet.yaml").read_text())
    fleet["spec"]["pools"][0]["chips"] = HUGE  # the scheduler's slot per host: an OverflowError, or all memory
    answer = call(app, "PUT", "/v1/fleet", json={"document": fleet})
    assert is_error_shape(answer, 422), answer.text
    assert answer.json()["problems"][0]["path"] == "spec.pools[0].chips"


def test_a_body_over_32_mib_is_a_413_before_it_is_parsed(app: FastAPI) -> None:
    from crossrail.api.bounds import MAX_BODY_BYTES

    body = b'{"document": "' + b"x" * MAX_BODY_BYTES + b'"}'
    answer = call(app, "POST", "/v1/place", content=body, headers={"content-type": "application/json"})
    assert is_error_shape(answer, 413), answer.text[:300]


DASHBOARD_HOSTILE = ["%C2%B2", "%00", "x" * 300, "9" * 30, "sim:%2Fdev%2Fzero", "experiment=%00", "run=9" * 9, "%FF"]


@pytest.mark.slow
def test_dashboard_pages_answer_hostile_parameters_without_a_500(app: FastAPI) -> None:
    """The dashboard's routes are not in the OpenAPI document, so the fuzz does not reach them: these do."""
    for value in DASHBOARD_HOSTILE:
        for url in (f"/ui/runs/{value}", f"/ui/static/{value}", f"/ui/report?before={value}", f"/ui/runs?x={value}"):
            answer = call(app, "GET", url)
            assert answer.status_code < 500, (url, answer.status_code, answer.text[:300])
            if answer.status_code >= 400 and answer.headers["content-type"].startswith("application/json"):
                assert is_error_shape(answer, answer.status_code), answer.text
