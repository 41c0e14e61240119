"""A run record's recorded spec, read typed: the agent reads these instead of digging in the document."""

from __future__ import annotations

from crossrail.store.records import RecordedSpec


def test_each_key_reads_as_recorded_and_a_missing_one_as_the_schema_default() -> None:
    spec = RecordedSpec.of(
        {
            "kind": "Experiment",
            "spec": {
                "retries": {"max": 2, "backoff": {"initial": "10s"}},
                "parts": {"learner": {"chips": 4}, "sampler": {"chips": 2}},
                "resources": {"chips": 8, "duration": "6h"},
                "accelerators": {"prefer": "tpu"},
                "parallelism": {"data": 4},
            },
        }
    )
    empty = RecordedSpec.of({"kind": "Experiment"})

    assert (spec.retries["max"], list(spec.parts), spec.duration, spec.data_parallel) == (
        2,
        ["learner", "sampler"],
        "6h",
        4,
    )
    assert spec.accelerators == {"prefer": "tpu"}
    assert (empty.retries, empty.parts, empty.resources, empty.accelerators) == ({}, {}, {}, {})
    assert (empty.duration, empty.data_parallel) == (None, 1)


def test_a_malformed_data_parallelism_counts_as_one_worker() -> None:
    for data in (0, -2, True, "4", None):
        assert RecordedSpec.of({"spec": {"parallelism": {"data": data}}}).data_parallel == 1
