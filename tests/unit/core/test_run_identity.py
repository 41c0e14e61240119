"""Run uids: lower-case ULIDs from the injected clock and randomness, and the directory they key."""

from __future__ import annotations

import pytest

from crossrail.core import ManualClock, is_uid, new_uid, run_dir_name
from crossrail.core.ids import uid_time


def test_a_uid_is_a_lower_case_ulid_of_the_clocks_time_and_the_random_bytes() -> None:
    clock = ManualClock(1_767_225_600.123)
    uid = new_uid(clock.now(), lambda n: bytes(range(n)))
    # 10 characters of milliseconds, then 16 of the bytes 00 01 02 ... 09, in Crockford base32
    assert uid == "01kdvdna3v" + "000g40r40m30e209"
    assert is_uid(uid)
    assert uid_time(uid) == pytest.approx(1_767_225_600.123)


def test_uids_differ_within_one_millisecond_and_sort_by_time() -> None:
    clock = ManualClock()
    same_ms = {new_uid(clock.now()) for _ in range(1000)}
    assert len(same_ms) == 1000
    first = new_uid(clock.now())
    clock.advance(0.002)
    assert new_uid(clock.now()) > first


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("tiny-1", id="a-run-id"),
        pytest.param("01KDVDNA0V0000G40R40M30E21", id="upper-case"),
        pytest.param("01kdvdna0v0000g40r40m30e2", id="25-characters"),
        pytest.param("81kdvdna0v0000g40r40m30e21", id="past-the-48-bit-time"),
        pytest.param("01kdvdna0v0000g40r40m30e2u", id="u-is-not-crockford"),
    ],
)
def test_what_is_not_a_uid(text: str) -> None:
    assert not is_uid(text)


def test_a_time_a_uid_cannot_hold_or_short_randomness_is_refused() -> None:
    with pytest.raises(ValueError, match="between 1970"):
        new_uid(-1.0)
    with pytest.raises(ValueError, match="10 random bytes"):
        new_uid(1.0, lambda n: b"\0")


def test_a_run_directory_carries_the_uid_and_a_legacy_run_keeps_its_old_one() -> None:
    assert run_dir_name("tiny-1", "01kdvdna0v0000g40r40m30e21") == "tiny-1-01kdvdna0v0000g40r40m30e21"
    assert run_dir_name("tiny-1", None) == "tiny-1"
