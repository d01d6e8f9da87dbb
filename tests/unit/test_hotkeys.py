"""The hot-key detector: bounded sketches, merged summaries, and a decider with hysteresis."""

from __future__ import annotations

import itertools
import math
import random
import zlib
from collections import Counter
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigError, HotKeyNoticeError
from streams.core.hotkeys.decider import Decision, HotKeyDecider, HotKeyPolicy, exact_hot_keys
from streams.core.hotkeys.sketch import MAX_SUMMARY_ITEMS, MergedView, SketchSummary, SlidingSketch, merge_summaries

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
        self.instance_of = {key: zlib.crc32(key.encode()) % PARTITIONS % INSTANCES for key in self.exact}
        sketches = [SlidingSketch(WINDOW_S, slices=5, capacity=1024) for _ in range(INSTANCES)]
        batch = 1000
        for start in range(0, events, batch):
            now_s = start / events * WINDOW_S
            per_instance: list[list[str]] = [[] for _ in range(INSTANCES)]
            for key in stream[start:start + batch]:
                per_instance[self.instance_of[key]].append(key)
            for sketch, keys_of_instance in zip(sketches, per_instance):
                sketch.add_many(keys_of_instance, now_s)
        self.at_s = WINDOW_S - 0.001  # the end of the window, still inside its last slice
        self.summaries = [s.summary(self.at_s, top=TOP, instance=f"worker-{i}") for i, s in enumerate(sketches)]


@pytest.fixture(scope="module")
def workload() -> Workload:
    return Workload()


def zipf_policy(share_multiple: float) -> HotKeyPolicy:
    return HotKeyPolicy(partitions=PARTITIONS, share_multiple=share_multiple, min_rate=10.0,
                        cool_multiple=share_multiple / 2, hold_s=5.0)


# share 1.0 is a realistic setting (a few hot keys); 0.05 puts the threshold in the
# dense Zipf tail, where ~20 keys are hot and neighbours are ~40 events/s apart.
@pytest.mark.parametrize("share_multiple", [1.0, 0.25, 0.05])
def test_decider_on_merged_summaries_finds_every_truly_hot_key(workload: Workload, share_multiple: float) -> None:
    policy = zipf_policy(share_multiple)
    oracle = exact_hot_keys(workload.exact, WINDOW_S, policy)
    decisions = HotKeyDecider(policy).decide(merge_summaries(workload.summaries), workload.at_s)
    flagged = {d.key: d.split_factor for d in decisions}

    assert len(workload.exact) >= 100_000
    assert "elephant-3" in oracle  # 12% of all traffic: hot under every policy here
    assert {d.kind for d in decisions} == {"hot"}
    assert set(oracle) <= set(flagged), "a truly hot key was missed"
    false_positives = set(flagged) - set(oracle)
    assert len(false_positives) <= 0.05 * len(flagged), sorted(false_positives)
    assert all(abs(flagged[key] - k) <= 1 for key, k in oracle.items())


def test_one_instance_alone_misjudges_keys_against_the_global_fair_share(workload: Workload) -> None:
    policy = zipf_policy(0.25)
    oracle = exact_hot_keys(workload.exact, WINDOW_S, policy)
    merged = merge_summaries(workload.summaries)
    alone = merge_summaries(workload.summaries[:1])
    assert alone.total_rate < merged.total_rate / 2
    flagged_alone = {d.key: d.split_factor for d in HotKeyDecider(policy).decide(alone, workload.at_s)}
    own_oracle = {key: k for key, k in oracle.items() if workload.instance_of[key] == 0}
    # Seeing a third of the traffic, it takes a third of the fair share for the whole:
    # it flags keys that are not hot, and splits the hot ones at least as far.
    assert set(flagged_alone) - set(own_oracle)
    assert all(flagged_alone[key] >= k for key, k in own_oracle.items())


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
    ({"span_s": 11.0}, "'span_s'"),
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


def test_merge_adds_rates_and_charges_unlisted_keys_the_unreported_bound() -> None:
    view = merge_summaries([summary("a", {"x": 500, "y": 100}, 1000, unreported=10),
                            summary("b", {"x": 200}, 2000, span_s=5.0, unreported=20)])
    assert view.total == 3000 and view.total_rate == pytest.approx(100 + 400)
    assert view.rates["x"] == pytest.approx(50 + 40)
    assert view.rates["y"] == pytest.approx(10 + 4)  # b did not list y: at most 20 events in 5 s
    assert view.rate("z") == view.unreported_rate == pytest.approx(1 + 4)


def test_merge_keeps_the_latest_summary_of_each_instance_and_drops_stale_ones() -> None:
    old, new = summary("a", {"x": 900}, 1000, at_s=90.0), summary("a", {"x": 100}, 1000, at_s=99.0)
    dead = summary("b", {"y": 900}, 1000, at_s=50.0)
    view = merge_summaries([new, old, dead], now_s=100.0, max_age_s=5.0)
    assert view.instances == ("a",) and dict(view.rates) == {"x": 10.0}
    empty = merge_summaries([])
    assert (empty.total, empty.total_rate, dict(empty.rates), empty.instances) == (0, 0.0, {}, ())


# --- the decider --------------------------------------------------------------------------

# 10 partitions, total 1000/s: fair share 100/s, enter above 200/s, below under 100/s.
POLICY = HotKeyPolicy(partitions=10, share_multiple=2.0, cool_multiple=1.0, min_rate=0.0, hold_s=10.0,
                      target_partition_rate=1000.0)  # a large target: k stays 2 in these tests


def view(rates: dict[str, float], total_rate: float = 1000.0, unreported_rate: float = 0.0) -> MergedView:
    return MergedView(instances=("a",), window_s=10.0, total=int(total_rate * 10), total_rate=total_rate,
                      rates=MappingProxyType(rates), unreported_rate=unreported_rate, at_s=0.0)


def run(decider: HotKeyDecider, timeline: list[tuple[float, float]], key: str = "k") -> list[tuple[float, Decision]]:
    out = []
    for now_s, rate in timeline:
        out += [(now_s, d) for d in decider.decide(view({key: rate}), now_s)]
    return out


def test_a_key_above_the_entry_threshold_becomes_hot_once() -> None:
    decisions = run(HotKeyDecider(POLICY), [(0, 150), (1, 250), (2, 260), (3, 300)])
    assert [(t, d.kind, d.split_factor, d.hot_since_s) for t, d in decisions] == [(1, "hot", 2, 1)]
    assert decisions[0][1].rate == 250 and decisions[0][1].share == 0.25


def test_dipping_between_the_thresholds_keeps_a_key_hot() -> None:
    decider = HotKeyDecider(POLICY)
    decisions = run(decider, [(0, 250)] + [(t, 150) for t in range(1, 60)])
    assert [d.kind for _, d in decisions] == ["hot"] and decider.hot == {"k": 2}


def test_a_dip_below_the_exit_threshold_shorter_than_hold_keeps_a_key_hot() -> None:
    timeline = [(0, 250), (1, 50), (10.9, 50), (11, 150), (12, 50), (21.9, 50)]
    assert [d.kind for _, d in run(HotKeyDecider(POLICY), timeline)] == ["hot"]


def test_a_key_below_the_exit_threshold_for_hold_s_cools_and_is_later_tombstoned() -> None:
    decider = HotKeyDecider(POLICY)
    decisions = run(decider, [(0, 250), (5, 50), (14, 50), (15, 50), (20, 50), (24.9, 0), (25, 0), (26, 0)])
    assert [(t, d.kind, d.split_factor, d.hot_since_s) for t, d in decisions] == [
        (0, "hot", 2, 0), (15, "cooled", 1, 0), (25, "tombstone", 1, 0)]
    assert decider.hot == {} and decider.decide(view({}), 100.0) == []


def test_a_cooled_key_that_heats_up_again_is_hot_again() -> None:
    decisions = run(HotKeyDecider(POLICY), [(0, 250), (1, 50), (11, 50), (12, 300), (40, 300)])
    assert [(t, d.kind, d.hot_since_s) for t, d in decisions] == [(0, "hot", 0), (11, "cooled", 0), (12, "hot", 12)]


def test_a_hot_key_missing_from_the_view_is_judged_by_the_unreported_rate() -> None:
    decider = HotKeyDecider(POLICY)
    decider.decide(view({"k": 250}), 0.0)
    assert decider.decide(view({}, unreported_rate=150.0), 20.0) == []  # might still be 150/s: stays hot
    decider.decide(view({}), 21.0)
    assert [d.kind for d in decider.decide(view({}), 31.0)] == ["cooled"]


def test_a_view_without_instances_changes_nothing() -> None:
    decider = HotKeyDecider(POLICY)
    decider.decide(view({"k": 250}), 0.0)
    assert decider.decide(merge_summaries([]), 100.0) == [] and decider.hot == {"k": 2}


def test_split_factor_grows_at_once_and_shrinks_only_after_hold() -> None:
    policy = HotKeyPolicy(partitions=10, share_multiple=2.0, cool_multiple=1.0, min_rate=0.0, hold_s=10.0)
    decider = HotKeyDecider(policy)  # target = fair share = 100/s
    timeline = [(0, 250), (1, 450), (2, 350), (5, 450), (6, 350), (15, 350), (16, 350), (30, 250)]
    decisions = run(decider, timeline)
    assert [(t, d.kind, d.split_factor) for t, d in decisions] == [
        (0, "hot", 3), (1, "changed", 5), (16, "changed", 4)]


def test_split_factor_is_capped_at_the_partition_count() -> None:
    policy = HotKeyPolicy(partitions=4, share_multiple=1.0, min_rate=0.0, hold_s=1.0)
    decisions = HotKeyDecider(policy).decide(view({"k": 900, "j": 260}), 0.0)
    assert [(d.key, d.split_factor) for d in decisions] == [("k", 4), ("j", 2)]


def test_at_most_max_hot_keys_are_hot_the_heaviest_first() -> None:
    policy = HotKeyPolicy(partitions=10, share_multiple=0.1, cool_multiple=0.1, min_rate=0.0, max_hot_keys=2)
    decider = HotKeyDecider(policy)
    decisions = decider.decide(view({"a": 20, "b": 40, "c": 30}), 0.0)
    assert [d.key for d in decisions] == ["b", "c"] and set(decider.hot) == {"b", "c"}


timelines = st.lists(st.tuples(st.floats(0, 5), st.floats(0, 1500), st.floats(1, 5000)), min_size=1, max_size=60)


@given(timelines, st.integers(2, 16), st.floats(0, 20))
@settings(max_examples=200, deadline=None)
def test_decisions_follow_the_hot_cooled_tombstone_life_cycle(steps, partitions: int, hold_s: float) -> None:
    policy = HotKeyPolicy(partitions=partitions, share_multiple=2.0, cool_multiple=1.0, min_rate=0.0, hold_s=hold_s)
    decider, now_s, state = HotKeyDecider(policy), 0.0, "unknown"
    allowed = {"unknown": {"hot"}, "hot": {"changed", "cooled"}, "cooled": {"hot", "tombstone"},
               "tombstone": {"hot"}}
    for dt, rate, total in steps:
        now_s += dt
        decisions = decider.decide(view({"k": rate}, total_rate=total), now_s)
        if hold_s > 0:  # (with no hold, "cooled" and "tombstone" may come on consecutive calls)
            assert decider.decide(view({"k": rate}, total_rate=total), now_s) == []  # nothing new: nothing said
        for d in decisions:
            assert d.kind in allowed[state] or (state == "hot" and d.kind == "changed")
            state = "hot" if d.kind == "changed" else d.kind
            if d.kind in ("hot", "changed"):
                assert 2 <= d.split_factor <= partitions
            else:
                assert d.split_factor == 1
            assert 0.0 <= d.share <= 1.0 and d.hot_since_s <= now_s
        assert set(decider.hot) == ({"k"} if state == "hot" else set())


# --- the oracle and the policy ---------------------------------------------------------


def test_exact_hot_keys_applies_the_entry_threshold_and_split_factor() -> None:
    policy = HotKeyPolicy(partitions=10, share_multiple=2.0, min_rate=0.0)
    counts = {"big": 4000, "warm": 2500, "edge": 2000, "cold": 100}  # 8600 in 10 s
    assert exact_hot_keys(counts, 10.0, policy) == {"big": 5, "warm": 3, "edge": 3}
    assert exact_hot_keys(counts, 10.0, HotKeyPolicy(partitions=10, min_rate=500.0)) == {}
    with pytest.raises(ValueError):
        exact_hot_keys(counts, 0.0, policy)


def test_thresholds_scale_with_the_total_rate_and_respect_the_floor() -> None:
    policy = HotKeyPolicy(partitions=10, share_multiple=2.0, cool_multiple=1.0, min_rate=50.0)
    assert policy.thresholds(1000.0) == (200.0, 100.0)
    assert policy.thresholds(100.0) == (50.0, 25.0)  # the floor, scaled by cool/share on the way out


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"partitions": 1}, "partitions"), ({"partitions": 4.0}, "partitions"),
    ({"share_multiple": 0}, "share_multiple"), ({"share_multiple": math.inf}, "share_multiple"),
    ({"cool_multiple": 3.0}, "cool_multiple"), ({"cool_multiple": 0}, "cool_multiple"),
    ({"min_rate": -1}, "min_rate"), ({"hold_s": math.nan}, "hold_s"),
    ({"target_partition_rate": -5}, "target_partition_rate"), ({"max_hot_keys": 0}, "max_hot_keys"),
])
def test_policy_is_validated_naming_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        HotKeyPolicy(**{"partitions": 12, **kwargs})
