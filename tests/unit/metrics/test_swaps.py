"""The swap book's growing arrays of durations: what it hands a tally stays as it was."""

from __future__ import annotations

import numpy as np

from crossrail.metrics.swaps import _Buffer


def test_a_taken_array_keeps_its_values_while_more_are_added_and_the_buffer_grows() -> None:
    buffer = _Buffer()
    chunks = [np.arange(n, dtype=np.float64) + 1000 * n for n in (3, 700, 1, 900)]
    for chunk in chunks[:2]:
        buffer.add(chunk)

    first = buffer.take()
    for chunk in chunks[2:]:  # past the room left, so the buffer grows
        buffer.add(chunk)
    second = buffer.take()

    assert first.tolist() == np.concatenate(chunks[:2]).tolist()
    assert second.tolist() == np.concatenate(chunks[2:]).tolist()
    assert buffer.take().tolist() == []
