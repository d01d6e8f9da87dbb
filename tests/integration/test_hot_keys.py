"""Hot keys on the real broker: detected live from merged sketches, split by every producer, exact results."""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from pathlib import Path

from test_worker_buckets import aggregates_by_slot, keys_covering_partitions, wait_for_topic
from worker_harness import TopicReader, running_worker

from streams.core.aggregate import Stats
from streams.core.hotkeys.decider import HotKeyPolicy, exact_hot_keys
from streams.core.routing.router import Router, RoutingMap
from streams.core.simulate import Workload, iter_keys
from streams.core.time.buckets import TimeBuckets
from streams.kafka.producer import RoutingProducer

PARTITIONS = 12
RATE = 800  # events/s the producer paces itself to (well within what one faust worker processes)
SHARE_MULTIPLE = 0.1  # hot above a tenth of one partition's fair share ...
SPLIT_FRACTION = 0.01  # ... and split into pieces that small, i.e. over (nearly) every partition
SETTINGS = dict(partitions=PARTITIONS, bucket_width="1m", grace="0s", allowed_delay="0s", idle_timeout="10s",
                retention="2h", hot_window_s=6.0, hot_share_multiple=SHARE_MULTIPLE,
                cool_share_multiple=SHARE_MULTIPLE / 2, hot_min_rate=5, hot_hold_s=30,
                hot_split_fraction=SPLIT_FRACTION, session_timeout_s=6, hot_min_window_events=1500)


def max_over_mean(counts: Counter, n: int) -> float:
    loads = [counts.get(p, 0) for p in range(n)]
    return max(loads) / (sum(loads) / n)


def paced(keys, rate: float, seconds: float):  # noqa: ANN001, ANN201 - a tiny generator for the test
    began = time.monotonic()
    sent = 0
    for key in keys:
        elapsed = time.monotonic() - began
        if elapsed >= seconds:
            return
        ahead = sent / rate - elapsed
        if ahead > 0.002:
            time.sleep(ahead)  # pacing the load generator to its target rate (not synchronisation)
        sent += 1
        yield key


def test_zipf_elephants_are_detected_split_and_aggregated_exactly(kafka_bootstrap: str, tmp_path: Path) -> None:
    workload = Workload("zipf", keys=100_000, zipf_exponent=1.1, seed=3)
    elephants = ["elephant-a", "elephant-b", "elephant-c"]
    keys = iter_keys(workload)

    def stream():  # noqa: ANN202 - every 8th event is one of three planted elephants
        i = 0
        for key in keys:
            i += 1
            yield elephants[(i // 8) % 3] if i % 8 == 0 else key

    with running_worker(kafka_bootstrap, tmp_path, **SETTINGS) as worker:
        names = worker.names
        wait_for_topic(kafka_bootstrap, names.events)
        router = Router(TimeBuckets("1m"), [RoutingMap(version=1, partitions=PARTITIONS, topic=names.events,
                                                       placement="jump", hash="xxh3")])
        producer = RoutingProducer(router, {"bootstrap.servers": kafka_bootstrap}, hot_keys_topic=names.hot_keys)
        assert producer.follower.wait_until_current(30)
        exact: Counter = Counter()
        oracle: dict[tuple[str, str], Stats] = defaultdict(Stats.empty)
        measured_split: Counter = Counter()
        measured_unsplit: Counter = Counter()
        unsplit = Router(TimeBuckets("1m"), [router.current])  # same map, empty split table
        began = time.monotonic()
        gen = stream()
        warm_up_s = 8.0
        for i, key in enumerate(paced(gen, RATE, 30.0)):
            decision = producer.send(key, float(i % 97))
            exact[key] += 1
            oracle[(decision.bucket_label, key)].add(float(i % 97))
            if time.monotonic() - began > warm_up_s:
                measured_split[decision.partition] += 1
                measured_unsplit[unsplit.route(key, 0).partition] += 1
        duration = time.monotonic() - began
        assert producer.flush(30) == 0

        hot = TopicReader(kafka_bootstrap, names.hot_keys, "hot_key_notice")
        hot.poll(1.0)
        notices = {v["key_display"]: v["split_factor"] for _, v in hot.records if v is not None}
        policy = HotKeyPolicy(partitions=PARTITIONS, share_multiple=SHARE_MULTIPLE, min_rate=5,
                              cool_multiple=SHARE_MULTIPLE / 2, target_fair_fraction=SPLIT_FRACTION)
        enter, _ = policy.thresholds(sum(exact.values()) / duration)
        rate = {k: c / duration for k, c in exact.items()}
        # The detector judges one window at a time, so a key's count in a window is
        # random (Poisson). A key is *clearly* hot (cold) when its expected count per
        # window is more than three standard deviations above (below) the threshold's.
        window = SETTINGS["hot_window_s"]
        threshold = enter * window
        clearly_hot = {k for k, r in rate.items() if r * window - 3 * math.sqrt(r * window) > threshold}
        clearly_cold = {k for k, r in rate.items() if r * window + 3 * math.sqrt(r * window) < threshold}
        missed = clearly_hot - set(notices)
        false_pos = [k for k in notices if k in clearly_cold or k not in rate]
        with_split, without = max_over_mean(measured_split, PARTITIONS), max_over_mean(measured_unsplit, PARTITIONS)
        print(f"\n[hot keys] {sum(exact.values()):,} events over {len(exact):,} keys in {duration:.1f} s; "
              f"{len(notices)} keys split; oracle hot: {sorted(exact_hot_keys(exact, duration, policy))[:8]}...; "
              f"max/mean with splitting {with_split:.2f}, without {without:.2f}")
        assert set(elephants) <= clearly_hot, "the planted elephants are hot by construction"
        assert missed == set(), f"false negatives: {sorted(missed)}"
        detail = [(v["key_display"], v["split_factor"], round(v["estimated_rate"]), round(v["share"], 4),
                   round(rate.get(v["key_display"], 0))) for _, v in hot.records if v is not None]
        assert len(false_pos) <= 0.05 * max(1, len(notices)), f"false positives: {false_pos}; enter {enter:.0f}/s; {detail}"
        assert all(2 <= k <= PARTITIONS for k in notices.values())
        assert with_split <= 1.2 < without, (with_split, without)

        # Stage 2 merges the salted partials back: close the bucket by pushing the watermark past it.
        closer_ts = int(time.time() * 1000) + 120_000
        for key in keys_covering_partitions(router, closer_ts):
            producer.send(key, 0.0, ts_ms=closer_ts)
        assert producer.close().failed == 0
        aggregates = TopicReader(kafka_bootstrap, names.aggregates, "aggregate")
        assert aggregates.until(lambda rs: all(aggregates_by_slot(rs).get(slot, {}).get("count") == s.count
                                               for slot, s in oracle.items()), 120, worker), worker.tail()
        got = aggregates_by_slot(aggregates.records)
        for slot, stats in oracle.items():
            assert (got[slot]["count"], got[slot]["sum"], got[slot]["min"], got[slot]["max"]) == \
                (stats.count, stats.sum, stats.min, stats.max)
        hot.close()
        aggregates.close()
