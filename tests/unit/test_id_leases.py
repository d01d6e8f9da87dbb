"""The pure lease rules on Snowflake worker IDs (streams.core.ids.lease)."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams.core.errors import ConfigError
from streams.core.ids.lease import (
    LeaseRecord,
    LeaseRecordError,
    LeaseTable,
    LeaseTerms,
    decode_lease_record,
    encode_lease_record,
)

LEASE = 1_000
DELAY = 500


def hold(worker: int, owner: str) -> LeaseRecord:
    return LeaseRecord(worker, owner, LEASE)


def test_first_hold_of_a_free_worker_id_takes_effect_and_a_rival_hold_is_refused() -> None:
    table = LeaseTable(DELAY)
    assert table.apply(hold(7, "a"), 10_000)
    assert not table.apply(hold(7, "b"), 10_001)
    assert table.holder(7, 10_500).owner == "a"
    assert table.refused == 1


def test_holder_renews_before_expiry_but_not_after() -> None:
    table = LeaseTable(DELAY)
    table.apply(hold(3, "a"), 0)
    assert table.apply(hold(3, "a"), LEASE - 1)
    assert table.leases[3].expires_ms == 2 * LEASE - 1
    assert not table.apply(hold(3, "a"), 2 * LEASE - 1 + 10)  # lapsed, resting: not even its old owner
    assert table.apply(hold(3, "a"), 2 * LEASE - 1 + DELAY)


def test_an_expired_worker_id_is_reused_only_after_the_reuse_delay() -> None:
    table = LeaseTable(DELAY)
    table.apply(hold(1, "a"), 0)
    assert not table.is_free(1, LEASE + DELAY - 1)
    assert not table.apply(hold(1, "b"), LEASE + DELAY - 1)
    assert table.is_free(1, LEASE + DELAY)
    assert table.apply(hold(1, "b"), LEASE + DELAY)
    assert table.holder(1, LEASE + DELAY).owner == "b"


def test_a_release_ends_the_lease_now_and_the_id_rests_before_reuse() -> None:
    table = LeaseTable(DELAY)
    table.apply(hold(2, "a"), 0)
    assert not table.apply(LeaseRecord(2, "b", LEASE, release=True), 10)  # only the holder releases
    assert table.apply(LeaseRecord(2, "a", LEASE, release=True), 100)
    assert table.holder(2, 101) is None
    assert not table.apply(hold(2, "b"), 100 + DELAY - 1)
    assert table.apply(hold(2, "b"), 100 + DELAY)


@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from("abcd"), st.integers(0, 400),
                          st.booleans()), max_size=60))
def test_no_two_owners_ever_hold_one_worker_id_at_once(steps: list[tuple[int, str, int, bool]]) -> None:
    """Replaying any log, the periods in which owners hold an ID never overlap (rest included)."""
    table = LeaseTable(DELAY)
    ts = 0
    periods: dict[int, list[tuple[str, int, int]]] = {}
    for worker, owner, gap, release in steps:
        ts += gap
        if table.apply(LeaseRecord(worker, owner, LEASE, release), ts):
            lease = table.leases[worker]
            spans = periods.setdefault(worker, [])
            if spans and spans[-1][0] == owner and spans[-1][2] > ts - (0 if release else 1):
                spans[-1] = (owner, spans[-1][1], lease.expires_ms)  # renewal or release: same holding
            else:
                spans.append((owner, ts, lease.expires_ms))
    for spans in periods.values():
        for (o1, _, end1), (o2, start2, _) in zip(spans, spans[1:]):
            assert start2 >= end1 + DELAY or o1 == o2


def test_pick_free_prefers_never_held_ids_and_returns_none_when_all_are_taken() -> None:
    table = LeaseTable(DELAY)
    rng = random.Random(1)
    for w in range(4):
        table.apply(hold(w, f"o{w}"), 0)
    assert table.pick_free(4, 0, rng) == 4
    table.apply(hold(4, "o4"), 0)
    assert table.pick_free(4, 10, rng) is None
    assert table.pick_free(4, LEASE + DELAY, rng) in range(5)


def test_a_lease_record_round_trips() -> None:
    record = LeaseRecord(1023, "host/abc", 30_000, release=True)
    assert decode_lease_record(encode_lease_record(record), 1023) == record


@pytest.mark.parametrize(("value", "field"), [
    (b"", "payload"),
    (b"not json", "payload"),
    (b"[1]", "payload"),
    (orjson.dumps({"v": 1, "worker": 1, "owner": "a", "lease_ms": 5}), "release"),
    (orjson.dumps({"v": 1, "worker": 1, "owner": "a", "lease_ms": 5, "release": False, "x": 1}), "x"),
    (orjson.dumps({"v": 2, "worker": 1, "owner": "a", "lease_ms": 5, "release": False}), "v"),
    (orjson.dumps({"v": 1, "worker": 1024, "owner": "a", "lease_ms": 5, "release": False}), "worker"),
    (orjson.dumps({"v": 1, "worker": -1, "owner": "a", "lease_ms": 5, "release": False}), "worker"),
    (orjson.dumps({"v": 1, "worker": True, "owner": "a", "lease_ms": 5, "release": False}), "worker"),
    (orjson.dumps({"v": 1, "worker": 1, "owner": "", "lease_ms": 5, "release": False}), "owner"),
    (orjson.dumps({"v": 1, "worker": 1, "owner": "a" * 129, "lease_ms": 5, "release": False}), "owner"),
    (orjson.dumps({"v": 1, "worker": 1, "owner": "a", "lease_ms": 0, "release": False}), "lease_ms"),
    (orjson.dumps({"v": 1, "worker": 1, "owner": "a", "lease_ms": 10**12, "release": False}), "lease_ms"),
    (orjson.dumps({"v": 1, "worker": 1, "owner": "a", "lease_ms": 5, "release": "yes"}), "release"),
])
def test_hostile_lease_records_are_refused_naming_the_field(value: bytes, field: str) -> None:
    with pytest.raises(LeaseRecordError) as info:
        decode_lease_record(value, 1023)
    assert info.value.field == field


def test_lease_terms_validate_their_fields() -> None:
    assert LeaseTerms().renew_every_ms == 10_000
    with pytest.raises(ConfigError, match="renew_ms"):
        LeaseTerms(lease_ms=1_000, renew_ms=1_000)
    with pytest.raises(ConfigError, match="lease_ms"):
        LeaseTerms(lease_ms=10)
