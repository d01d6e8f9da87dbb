"""The hot-key detector: bounded sketches, merged summaries, and a decider with hysteresis."""

from __future__ import annotations

import itertools
import math
import random
import zlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigError, HotKeyNoticeError
from streams.core.hotkeys.decider import BalanceDecider, BalancePolicy, max_over_mean
from streams.core.hotkeys.sketch import (
    MAX_SUMMARY_ITEMS,
    SketchSummary,
    SlidingSketch,
    merge_summaries,
)

# --- a realistic workload: Zipf plus elephants, three instances -------------------------

WINDOW_S = 10.0
PARTITIONS = 12
INSTANCES = 3
TOP = 256  # items per summary; the unreported bound shrinks as this grows
ELEPHANTS = {"elephant-0": 0.02, "elephant-1": 0.04, "elephant-2": 0.07, "elephant-3": 0.12}


class Workload:
    """1,000,000 seeded events spread evenly over one window.

    Keys: Zipf(1.1) over a million user keys (about 112,000 of them show up) plus
    four planted elephants taking 25% of the traffic.
    """

    def __init__(self, seed: int = 7, events: int = 1_000_000, universe: int = 1_000_000) -> None:
        rng = random.Random(seed)
        zipf = [r ** -1.1 for r in range(1, universe + 1)]
        scale = (1 - sum(ELEPHANTS.values())) / sum(zipf)
        keys = [f"user-{r}" for r in range(universe)] + list(ELEPHANTS)
        weights = [w * scale for w in zipf] + list(ELEPHANTS.values())
        stream = rng.choices(keys, cum_weights=list(itertools.accumulate(weights)), k=events)
        self.exact = Counter(stream)
        # Each key lives on one of 12 partitions; instance i owns partitions p with p % 3 == i.
        self.partition_of = {key: zlib.crc32(key.encode()) % PARTITIONS for key in self.exact}
        self.instance_of = {key: p % INSTANCES for key, p in self.partition_of.items()}
        sketches = [SlidingSketch(WINDOW_S, slices=5, capacity=1024) for _ in range(INSTANCES)]
        batch = 1000
        for start in range(0, events, batch):
            now_s = start / events * WINDOW_S
            per_instance: list[list[str]] = [[] for _ in range(INSTANCES)]
            per_partition = Counter()
            for key in stream[start:start + batch]:
                per_instance[self.instance_of[key]].append(key)
                per_partition[self.partition_of[key]] += 1
            for sketch, keys_of_instance in zip(sketches, per_instance):
                sketch.add_many(keys_of_instance, now_s)
            for partition, count in per_partition.items():
                sketches[partition % INSTANCES].add_partition(partition, now_s, count)
        self.at_s = WINDOW_S - 0.001  # the end of the window, still inside its last slice
        self.summaries = [s.summary(self.at_s, top=TOP, instance=f"worker-{i}") for i, s in enumerate(sketches)]


@pytest.fixture(scope="module")
def workload() -> Workload:
    return Workload()


def test_the_decider_on_merged_summaries_evens_the_exact_partition_loads(workload: Workload) -> None:
    view = merge_summaries(workload.summaries)
    assert sorted(view.partition_rates) == list(range(PARTITIONS))
    before = [0.0] * PARTITIONS
    for key, count in workload.exact.items():
        before[workload.partition_of[key]] += count
    assert [view.partition_rates[p] * workload.at_s for p in range(PARTITIONS)] == pytest.approx(before, rel=1e-9)
    policy = BalancePolicy(partitions=PARTITIONS)
    assert max_over_mean(before) > policy.balance_target
    decider = BalanceDecider(policy, home=workload.partition_of.__getitem__)
    decisions = decider.decide(view, workload.at_s)
    assert decisions and {d.kind for d in decisions} == {"placed"}
    after = [0.0] * PARTITIONS  # the exact counts, routed by the new directory
    for key, count in workload.exact.items():
        parts = decider.directory.get(key, (workload.partition_of[key],))
        for p in parts:
            after[p] += count / len(parts)
    assert max_over_mean(after) <= 1.10
    assert len(decisions) <= 0.001 * len(workload.exact), "too many keys touched"


def test_merged_rates_add_the_instances_and_bound_the_exact_rates(workload: Workload) -> None:
    merged = merge_summaries(workload.summaries)
    assert merged.total == sum(workload.exact.values())
    assert merged.instances == ("worker-0", "worker-1", "worker-2")
    for key, rate in merged.rates.items():
        assert workload.exact[key] / workload.at_s <= rate + 1e-9  # an upper bound
    heaviest = max(workload.exact, key=workload.exact.__getitem__)
    assert merged.rates[heaviest] == pytest.approx(workload.exact[heaviest] / workload.at_s, rel=0.01)


# --- the sketch ---------------------------------------------------------------------------


def test_sketch_counts_are_exact_while_the_keys_fit() -> None:
    sketch = SlidingSketch(10.0, slices=5, capacity=64)
    sketch.add_many(["a", "b", "a"], 0.0)
    sketch.add("c", 3.0, weight=5)
    sketch.add("a", 9.0)
    summary = sketch.summary(9.5, instance="w")
    assert summary.items == (("c", 5), ("a", 3), ("b", 1))
    assert (summary.total, summary.max_error, summary.unreported_bound) == (9, 0, 0)
    assert (summary.instance, summary.window_s, summary.span_s, summary.at_s) == ("w", 10.0, 9.5, 9.5)


def test_old_slices_leave_the_window() -> None:
    sketch = SlidingSketch(10.0, slices=5, capacity=64)  # slices of 2 s
    sketch.add("old", 1.0)
    sketch.add("new", 11.0)
    summary = sketch.summary(11.5)
    assert dict(summary.items) == {"new": 1}
    assert summary.span_s == pytest.approx(9.5)  # slices [2, 4) .. [10, 12), read at 11.5
    assert sketch.summary(40.0).total == 0


def test_a_time_step_backwards_counts_into_the_current_slice() -> None:
    sketch = SlidingSketch(10.0, slices=5, capacity=64)
    sketch.add("a", 100.0)
    sketch.add("a", 50.0)
    assert dict(sketch.summary(100.5).items) == {"a": 2}


def test_a_young_sketch_reports_the_span_it_has_seen_at_least_one_slice() -> None:
    sketch = SlidingSketch(10.0, slices=5, capacity=64)
    sketch.add("a", 100.1)
    assert sketch.summary(100.3).span_s == pytest.approx(2.0)
    assert sketch.summary(105.0).span_s == pytest.approx(5.0)


def _read(sketches: list[SlidingSketch], now_s: float, event_times: list[float]) -> None:
    """One batch read at ``now_s``: its events (one per event time) on partition 0."""
    for sketch in sketches:
        sketch.add_partition(0, now_s, len(event_times))
        if event_times:
            sketch.add_event_time(now_s, max(event_times))


def _reader(until_s: float, stall: tuple[float, float] | None) -> tuple[SlidingSketch, SlidingSketch]:
    """1,000 events/s from 100 s on, read every 0.1 s but not during ``stall`` (then the backlog at once):
    a sketch fed the events' times, and one fed only the reader's clock."""
    timed, untimed = SlidingSketch(5.0, slices=5), SlidingSketch(5.0, slices=5)
    backlog: list[float] = []
    for i in range(round((until_s - 100.0) / 0.1)):
        now = 100.0 + i * 0.1
        backlog.extend(now - 0.1 + (j + 0.5) * 0.001 for j in range(100))
        if stall is not None and stall[0] <= now < stall[1]:
            continue  # stalled: the traffic waits in the partition
        _read([timed], now, backlog)
        untimed.add_partition(0, now, len(backlog))
        backlog = []
    return timed, untimed


def test_a_reader_that_stalled_and_caught_up_reports_the_traffics_rate_not_its_reading_rate() -> None:
    # A 2 s stall that began before the window, then the backlog read at once: by the reader's clock
    # the window [110, 114] holds 5.5 s of traffic in 4 s, and its rate reads 1.375x the traffic's.
    def rate(summary: SketchSummary) -> float:
        return sum(count for _, count in summary.partition_counts) / summary.span_s

    timed, untimed = _reader(114.0, (108.5, 110.5))
    caught_up, naive = timed.summary(114.0), untimed.summary(114.0)
    assert rate(naive) > 1.3 * 1000  # the reader's clock overstates the traffic
    assert rate(caught_up) == pytest.approx(1000, rel=0.03)
    assert caught_up.partition_counts == naive.partition_counts  # the same counts; the span is the traffic's
    # A reader that keeps up reports its own span: there is nothing to correct.
    timed, untimed = _reader(114.0, None)
    assert timed.summary(114.0).span_s == untimed.summary(114.0).span_s
    assert rate(timed.summary(114.0)) == pytest.approx(1000, rel=0.03)


def test_a_partition_that_fell_behind_and_caught_up_alone_is_corrected_alone() -> None:
    # Two partitions at 500 events/s, each event keyed by its partition; partition 1's fetch stalls for 2 s
    # (a starved worker) and its backlog is read at once, while partition 0 keeps up. The reader's window
    # [110, 114] holds 5.5 s of partition 1's traffic: read by the reader's clock it is 1.375x as busy as
    # partition 0, and its key as heavy. Fed each partition's event time, only partition 1 is scaled back.
    timed, untimed = SlidingSketch(5.0, slices=5), SlidingSketch(5.0, slices=5)
    backlog: dict[int, list[float]] = {0: [], 1: []}
    for i in range(140):
        now = 100.0 + i * 0.1
        for p in (0, 1):
            backlog[p].extend(now - 0.1 + (j + 0.5) * 0.002 for j in range(50))
        reading = [p for p in (0, 1) if p == 0 or not 108.5 <= now < 110.5]
        for sketch in (timed, untimed):
            for p in reading:
                sketch.add_partition(p, now, len(backlog[p]))
                sketch.add_pairs([(p, f"k{p}")] * len(backlog[p]), now)
        timed.add_partition_event_times(now, {p: max(backlog[p]) for p in reading})
        for p in reading:
            backlog[p] = []

    def rates(summary: SketchSummary) -> tuple[dict[int, float], dict[str, float]]:
        return ({p: c / summary.span_s for p, c in summary.partition_counts},
                {k: c / summary.span_s for k, c in summary.items})

    (naive_parts, naive_keys) = rates(untimed.summary(114.0, top=4, partitions=[0, 1], per_partition=2))
    (parts, keys) = rates(timed.summary(114.0, top=4, partitions=[0, 1], per_partition=2))
    assert naive_parts[1] > 1.3 * naive_parts[0] and naive_keys["k1"] > 1.3 * naive_keys["k0"]
    assert parts[1] == pytest.approx(500, rel=0.03) and keys["k1"] == pytest.approx(500, rel=0.03)
    assert parts[0] == naive_parts[0] and keys["k0"] == naive_keys["k0"]  # the partition that kept up is as read


def test_event_time_that_stands_still_or_leaps_does_not_distort_the_span() -> None:
    stopped = SlidingSketch(5.0, slices=5)
    for i in range(30):  # the stream stops at 102 s: events read later carry nothing newer
        now = 100.0 + i * 0.1
        _read([stopped], now, [min(now, 102.0)])
    reader_span = stopped.summary(104.0).span_s
    assert reader_span == pytest.approx(4.0)  # slices [100, 101) .. [104, 105), read at 104: the reader's
    leap = SlidingSketch(5.0, slices=5)
    for i in range(60):
        now = 100.0 + i * 0.1
        _read([leap], now, [now if i != 30 else now + 3600.0])  # one event stamped an hour ahead
    assert leap.summary(105.95).span_s == pytest.approx(4.95)  # the reader's: a time ahead of it counts as now


@given(st.lists(st.integers(0, 300), max_size=3000), st.integers(1, 40))
@settings(max_examples=60, deadline=None)
def test_sketch_counts_are_upper_bounds_within_the_stated_error(ids: list[int], top: int) -> None:
    sketch = SlidingSketch(10.0, slices=2, capacity=16)  # tiny, so the sketch must evict
    for i, key_id in enumerate(ids):
        sketch.add(f"k{key_id}", 0.0 + 9.0 * i / max(1, len(ids)))
    summary = sketch.summary(9.5, top=top)
    exact = Counter(f"k{i}" for i in ids)
    assert summary.total == len(ids)
    listed = dict(summary.items)
    for key, count in listed.items():
        assert exact[key] <= count <= exact[key] + summary.max_error
    for key, count in exact.items():
        if key not in listed:
            assert count <= summary.unreported_bound


def test_retained_items_do_not_grow_with_the_number_of_distinct_keys() -> None:
    retained = {}
    for distinct in (1_000, 100_000):
        sketch = SlidingSketch(10.0, slices=5, capacity=1024)
        keys = [f"key-{i}" for i in range(distinct)]
        for step in range(10):  # ten batches, two per 2-second slice
            sketch.add_many(keys[step::10] if distinct > 1_000 else keys, now_s=float(step))
        retained[distinct] = sketch.retained_items
        assert retained[distinct] <= sketch.max_retained_items
    assert 5_000 <= retained[1_000] <= 6_000  # every key, once per slice, plus a pending batch
    assert retained[100_000] <= SlidingSketch(10.0, 5, 1024).max_retained_items < 10_000  # not 100,000


def test_keys_the_sketch_cannot_encode_are_dropped_and_counted() -> None:
    sketch = SlidingSketch(10.0, capacity=16)
    sketch.add_many(["ok", 5, "\udc80", "ok"], 0.0)  # type: ignore[list-item]
    summary = sketch.summary(1.0)
    assert dict(summary.items) == {"ok": 2} and sketch.rejected == 2


@pytest.mark.parametrize("now_s", [math.nan, math.inf])
def test_sketch_rejects_a_non_finite_time(now_s: float) -> None:
    with pytest.raises(ValueError, match="now_s"):
        SlidingSketch(10.0).add("a", now_s)


def test_sketch_rejects_a_bad_weight() -> None:
    for weight in (0, -3, 1.5):
        with pytest.raises(ValueError, match="weight"):
            SlidingSketch(10.0).add("a", 0.0, weight=weight)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"window_s": 0}, "window_s"), ({"window_s": math.nan}, "window_s"), ({"window_s": True}, "window_s"),
    ({"slices": 0}, "slices"), ({"capacity": 8}, "capacity"), ({"capacity": 10**7}, "capacity"),
])
def test_sketch_settings_are_validated_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        SlidingSketch(**{"window_s": 10.0, **kwargs})


# --- summaries on the wire -----------------------------------------------------------------


def summary_record(**change: object) -> dict:
    record = {"instance": "w1", "window_s": 10.0, "span_s": 9.5, "total": 100,
              "items": [{"key": "a", "count": 60}, {"key": "b", "count": 20}],
              "max_error": 2, "unreported_bound": 5, "at_s": 1_700_000_000.25}
    record.update(change)
    return record


def test_summary_records_round_trip() -> None:
    summary = SketchSummary.from_record(summary_record())
    assert summary.items == (("a", 60), ("b", 20))
    assert SketchSummary.from_record(summary.to_record()) == summary
    sketch = SlidingSketch(10.0)
    sketch.add_many(["x", "y", "x"], 5.0)
    real = sketch.summary(6.0, instance="w2")
    assert SketchSummary.from_record(real.to_record()) == real


@pytest.mark.parametrize(("change", "message"), [
    ({"total": -1}, "'total'"),
    ({"total": 2**63}, "'total'"),
    ({"total": 100.0}, "'total'"),
    ({"total": True}, "'total'"),
    ({"window_s": math.nan}, "'window_s'"),
    ({"window_s": 1e9}, "'window_s'"),
    ({"window_s": 0}, "'window_s'"),
    ({"span_s": 0.0}, "'span_s'"),
    ({"span_s": 21.0}, "'span_s'"),
    ({"at_s": math.inf}, "'at_s'"),
    ({"at_s": "now"}, "'at_s'"),
    ({"instance": 7}, "'instance'"),
    ({"instance": "w" * 2000}, "'instance'"),
    ({"max_error": 101}, "'max_error'"),
    ({"unreported_bound": 1}, "unreported_bound"),
    ({"items": [{"key": f"k{i}", "count": 1} for i in range(MAX_SUMMARY_ITEMS + 1)]}, "'items'"),
    ({"items": {"a": 1}}, "'items'"),
    ({"items": [["a", 1]]}, "'items'"),
    ({"items": [{"key": 5, "count": 1}]}, "'items.key'"),
    ({"items": [{"key": b"a", "count": 1}]}, "'items.key'"),
    ({"items": [{"key": "", "count": 1}]}, "'items.key'"),
    ({"items": [{"key": "a", "count": -1}]}, "'items.count'"),
    ({"items": [{"key": "a", "count": 101}]}, "'items.count'"),
    ({"items": [{"key": "a", "count": math.nan}]}, "'items.count'"),
    ({"items": [{"key": "a", "count": 1}, {"key": "a", "count": 2}]}, "repeats"),
    ({"items": [{"key": "a", "count": 1, "more": 0}]}, "'items'"),
])
def test_hostile_summaries_are_rejected_naming_the_problem(change: dict, message: str) -> None:
    with pytest.raises(HotKeyNoticeError, match=message):
        SketchSummary.from_record(summary_record(**change))


@pytest.mark.parametrize("record", [None, [], "summary", {"instance": "w"}, {**summary_record(), "extra": 1}])
def test_summary_records_of_the_wrong_shape_are_rejected(record: object) -> None:
    with pytest.raises(HotKeyNoticeError):
        SketchSummary.from_record(record)  # type: ignore[arg-type]


# --- merging -----------------------------------------------------------------------------


def summary(instance: str, items: dict[str, int], total: int, at_s: float = 100.0, span_s: float = 10.0,
            unreported: int = 0) -> SketchSummary:
    return SketchSummary(instance=instance, window_s=10.0, span_s=span_s, total=total,
                         items=tuple(items.items()), max_error=0, unreported_bound=unreported, at_s=at_s)


def test_merge_adds_the_listed_rates_and_bounds_unlisted_keys_by_the_unreported_bounds() -> None:
    view = merge_summaries([summary("a", {"x": 500, "y": 100}, 1000, unreported=10),
                            summary("b", {"x": 200}, 2000, span_s=5.0, unreported=20)])
    assert view.total == 3000 and view.total_rate == pytest.approx(100 + 400)
    assert view.rates["x"] == pytest.approx(50 + 40)
    # b did not list y: its partitions carry too little of y to matter; at 50 instances, charging y
    # every instance's bound would make a one-partition key look many times its weight.
    assert view.rates["y"] == pytest.approx(10)
    assert view.rate("z") == view.unreported_rate == pytest.approx(1 + 4)


def test_merge_keeps_the_latest_summary_of_each_instance_and_drops_stale_ones() -> None:
    old, new = summary("a", {"x": 900}, 1000, at_s=90.0), summary("a", {"x": 100}, 1000, at_s=99.0)
    dead = summary("b", {"y": 900}, 1000, at_s=50.0)
    view = merge_summaries([new, old, dead], now_s=100.0, max_age_s=5.0)
    assert view.instances == ("a",) and dict(view.rates) == {"x": 10.0}
    empty = merge_summaries([])
    assert (empty.total, empty.total_rate, dict(empty.rates), empty.instances) == (0, 0.0, {}, ())
