"""Stage 1 judges each partition's fetch state from librdkafka's statistics (streams.worker.loop.fetch_states)."""

from __future__ import annotations

from typing import Any

from streams.worker.processor import FetchState
from streams.worker.loop import fetch_states


def stats(*, leader_up: bool = True, fetch_state: str = "active", hi: int = 120, next_offset: int = 100) -> dict[str, Any]:
    """A trimmed librdkafka statistics report: broker 1 leads events[0]; partition -1 is librdkafka's internal one."""
    return {
        "brokers": {"127.0.0.1:9092/1": {"nodeid": 1, "state": "UP" if leader_up else "DOWN"}},
        "topics": {"events": {"partitions": {
            "0": {"leader": 1, "fetch_state": fetch_state, "hi_offset": hi, "next_offset": next_offset},
            "-1": {"leader": -1, "fetch_state": "none", "hi_offset": -1001, "next_offset": -1001},
        }}},
    }


def test_a_partition_fetched_from_a_live_leader_is_heard_from_now() -> None:
    got = fetch_states(stats(), [("events", 0)], 5_000, {}, {("events", 0): 7})
    assert got == {("events", 0): FetchState(120, 5_000, 7, 100)}


def test_a_partition_whose_leader_is_down_keeps_the_time_it_was_last_heard_from() -> None:
    before = {("events", 0): FetchState(120, 4_000, 7, 100)}
    got = fetch_states(stats(leader_up=False), [("events", 0)], 9_000, before, {("events", 0): 7})
    assert got[("events", 0)].fetched_at_ms == 4_000


def test_a_partition_not_fetched_yet_has_no_high_watermark_and_was_never_heard_from() -> None:
    got = fetch_states(stats(fetch_state="offset-query", hi=-1001, next_offset=-1001), [("events", 0)], 9_000, {}, {})
    assert got[("events", 0)] == FetchState(None, None, None, None)


def test_an_owned_partition_missing_from_the_report_is_kept_silent() -> None:
    before = {("events", 3): FetchState(50, 1_000, 0, 40)}
    got = fetch_states(stats(), [("events", 3)], 9_000, before, {("events", 3): 0})
    assert got == {("events", 3): FetchState(None, 1_000, 0, None)}
