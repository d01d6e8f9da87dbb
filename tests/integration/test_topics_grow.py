"""``streams topics grow`` on the real broker: the plan, the partitions it adds, the maps it publishes, refusals.

Every run is a subprocess with its settings in ``STREAMS_*`` variables and its topic
names as flags, so each test has its own events, changelog, routing-maps and
sketches topics.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from test_cli_broker import ROOT, one_error_line, topics_now

from streams.core.hotkeys.sketch import SketchSummary
from streams.core.routing.growth import plan_growth, sketch_weights
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.kafka.admin import topic_partitions
from streams.kafka.maps import publish_map, read_maps

BUCKETS = TimeBuckets("1m", grace="10s")
LEAD_MS = 70_000  # the default: one bucket width + grace


class Fleet:
    """One test's topics and settings: ``run("--dry-run")`` runs ``streams topics grow`` against them."""

    def __init__(self, bootstrap: str, make_topic: Callable[..., str], *, placement: str, hash_name: str,
                 changelog: bool = True, events_partitions: int = 6) -> None:
        self.bootstrap = bootstrap
        self.client = {"bootstrap.servers": bootstrap}
        self.app_id = f"grow-app-{uuid.uuid4().hex[:8]}"
        self.events = make_topic("grow-events", partitions=events_partitions)
        self.maps = make_topic("grow-maps", partitions=1, config={"cleanup.policy": "compact"})
        self.sketches = make_topic("grow-sketches", partitions=1)
        self.changelog = f"{self.app_id}-stage1-changelog"
        if changelog:
            admin = AdminClient(self.client)  # kept alive until the future resolves
            admin.create_topics([NewTopic(self.changelog, events_partitions, 1)])[self.changelog].result(30)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
        self.env.update(STREAMS_PLACEMENT=placement, STREAMS_HASH=hash_name, STREAMS_APP_ID=self.app_id,
                        STREAMS_BUCKET_WIDTH="1m", STREAMS_GRACE="10s", STREAMS_PARTITIONS=str(events_partitions))

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "streams.cli", "topics", "grow", "--bootstrap-server", self.bootstrap,
             "--events-topic", self.events, "--routing-maps-topic", self.maps, "--sketches-topic", self.sketches,
             *args], capture_output=True, text=True, timeout=120, env=self.env, cwd=ROOT)

    def counts(self) -> tuple[int, int | None]:
        changelog = topic_partitions(self.client, self.changelog) if self.changelog in topics_now(
            self.bootstrap) else None
        return topic_partitions(self.client, self.events), changelog

    def cleanup(self) -> None:
        if self.changelog in topics_now(self.bootstrap):
            admin = AdminClient(self.client)  # kept alive until the future resolves
            admin.delete_topics([self.changelog])[self.changelog].result(30)


@pytest.fixture
def fleet(kafka_bootstrap: str, make_topic: Callable[..., str]) -> Iterator[Callable[..., Fleet]]:
    """Makes a Fleet (keyword arguments as Fleet's); its changelog topic is deleted afterwards."""
    made: list[Fleet] = []

    def make(**kwargs: Any) -> Fleet:
        made.append(Fleet(kafka_bootstrap, make_topic, **kwargs))
        return made[-1]

    yield make
    for f in made:
        f.cleanup()


def effective_bounds(before_ms: int, after_ms: int) -> tuple[int, int]:
    """The first bucket starts at or after ``now + lead`` for a ``now`` somewhere in [before, after]."""
    width = BUCKETS.width_ms
    return -(-(before_ms + LEAD_MS) // width) * width, -(-(after_ms + LEAD_MS) // width) * width


def publish_sketches(bootstrap: str, topic: str) -> list[SketchSummary]:
    now_s = time.time()
    summaries = [
        SketchSummary(instance="w1", window_s=5.0, span_s=5.0, total=5000,
                      items=tuple((f"tenant-{i}", 400 - 10 * i) for i in range(30)), max_error=0,
                      unreported_bound=5, at_s=now_s),
        SketchSummary(instance="w2", window_s=5.0, span_s=5.0, total=3000,
                      items=tuple((f"tenant-{i}", 300 - 5 * i) for i in range(0, 40, 2)), max_error=0,
                      unreported_bound=5, at_s=now_s),
    ]
    producer = Producer({"bootstrap.servers": bootstrap})
    for s in summaries:
        producer.produce(topic, orjson.dumps(s.to_record()), s.instance.encode())
    producer.produce(topic, b"not a summary", b"w3")  # skipped, as the decider skips it
    assert producer.flush(30) == 0
    return summaries


def test_dry_run_prints_the_plan_from_the_sketches_and_changes_nothing(fleet: Callable[..., Fleet]) -> None:
    f = fleet(placement="jump", hash_name="xxh3")
    summaries = publish_sketches(f.bootstrap, f.sketches)
    before = int(time.time() * 1000)
    result = f.run("--partitions", "8", "--dry-run", "--json")
    after = int(time.time() * 1000)
    assert result.returncode == 0, result.stderr
    plan = orjson.loads(result.stdout)

    v1 = RoutingMap(version=1, partitions=6, topic=f.events, placement="jump", hash="xxh3")
    assert plan["current"] == v1.to_record() and plan["dry_run"] is True
    low, high = effective_bounds(before, after)
    assert low <= plan["effective_ms"] <= high and plan["effective_ms"] % BUCKETS.width_ms == 0
    assert plan["new"] == {**v1.to_record(), "version": 2, "partitions": 8, "first_bucket_ms": plan["effective_ms"]}
    assert plan["effective_bucket"] == BUCKETS.label_of(plan["effective_ms"])
    # The same figures, worked out here from the summaries published above.
    rates, rest = sketch_weights(summaries)
    oracle = plan_growth(v1, 8, now_ms=plan["effective_ms"] - LEAD_MS - 1, buckets=BUCKETS, keys=list(rates),
                         weights=rates, other_weight=rest)
    assert oracle.sampled_keys == 35  # tenant-0..29 from w1, and the even tenants 30..38 only w2 lists
    assert (plan["sampled_keys"], plan["moved_keys"]) == (oracle.sampled_keys, oracle.moved_keys)
    assert 0 < oracle.moved_keys < 35
    assert plan["traffic_fraction"] == pytest.approx(oracle.traffic_fraction)
    assert plan["key_source"].startswith("heavy keys of the latest hot-key sketches (35 keys)")
    assert plan["expected_fraction"] == 0.25
    assert plan["topics"] == [{"name": f.changelog, "partitions": 6, "new_partitions": 8},
                              {"name": f.events, "partitions": 6, "new_partitions": 8}]

    text = f.run("--partitions", "8", "--dry-run")
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert f"grow {f.events} from 6 to 8 partitions - dry run" in out
    assert "jump/xxh3" in out and f"keys moved" in out and "traffic moved" in out
    assert f"{oracle.key_fraction:.1%} ({oracle.moved_keys:,} of 35: heavy keys" in out
    assert f"{oracle.traffic_fraction:.1%} (hot-key sketch rates" in out
    assert "uniform expectation" in out and "25.0% of keys move" in out
    assert "the routing-maps topic was empty: v1 comes from the settings" in out

    assert f.counts() == (6, 6) and read_maps(f.client, f.maps) == []


def test_dry_run_without_sketches_uses_a_synthetic_uniform_sample_and_says_so(fleet: Callable[..., Fleet]) -> None:
    f = fleet(placement="jump", hash_name="xxh3")
    plan = orjson.loads(f.run("--partitions", "8", "--dry-run", "--json").stdout)
    assert plan["key_source"] == "synthetic uniform sample of 100,000 keys"
    assert plan["sampled_keys"] == 100_000 and abs(plan["key_fraction"] - 0.25) < 0.007
    assert plan["traffic_fraction"] is None and plan["traffic_source"].startswith("no producer traffic known")
    text = f.run("--partitions", "8", "--dry-run")
    assert text.returncode == 0, text.stderr
    assert "traffic moved" in text.stdout and "no producer traffic known" in text.stdout
    assert "unknown" not in text.stdout and " - (" not in text.stdout


def test_a_keys_file_is_the_sample_and_its_repeats_weigh_the_traffic(
        fleet: Callable[..., Fleet], tmp_path: Path) -> None:
    f = fleet(placement="jump", hash_name="xxh3")
    keys = [f"user-{i}" for i in range(2000)]
    heavy = keys[:20]
    path = tmp_path / "keys.txt"
    path.write_text("\n".join(keys + heavy * 50) + "\n\n")  # the first 20 keys carry a third of the lines
    plan = orjson.loads(f.run("--partitions", "8", "--dry-run", "--json", "--keys", str(path)).stdout)
    v1 = RoutingMap(version=1, partitions=6, topic=f.events, placement="jump", hash="xxh3")
    v2 = RoutingMap(version=2, partitions=8, topic=f.events, placement="jump", hash="xxh3")
    moved = {k for k in keys if v1.partition_of(k) != v2.partition_of(k)}
    assert (plan["sampled_keys"], plan["moved_keys"]) == (2000, len(moved))
    lines_moved = len(moved) + 50 * len(moved & set(heavy))
    assert plan["traffic_fraction"] == pytest.approx(lines_moved / (2000 + 50 * 20))
    assert plan["key_source"] == f"keys file {path} (2,000 distinct keys)"
    assert f.counts() == (6, 6) and read_maps(f.client, f.maps) == []


def test_grow_six_to_eight_adds_partitions_to_events_and_changelog_and_publishes_v1_then_v2(fleet: Callable[..., Fleet]) -> None:
    f = fleet(placement="jump", hash_name="xxh3")
    before = int(time.time() * 1000)
    result = f.run("--partitions", "8", "--json")
    after = int(time.time() * 1000)
    assert result.returncode == 0, result.stderr
    plan = orjson.loads(result.stdout)
    assert plan["dry_run"] is False
    assert f.counts() == (8, 8)

    history = read_maps(f.client, f.maps)
    v1 = RoutingMap(version=1, partitions=6, topic=f.events, placement="jump", hash="xxh3", first_bucket_ms=0)
    assert [m.version for m in history] == [1, 2] and history[0] == v1
    v2 = history[1]
    assert (v2.partitions, v2.topic, v2.placement, v2.hash) == (8, f.events, "jump", "xxh3")
    low, high = effective_bounds(before, after)
    assert low <= v2.first_bucket_ms <= high and v2.first_bucket_ms == plan["effective_ms"]

    again = f.run("--partitions", "8")
    assert "it already has 8; give more than 8" in one_error_line(again)
    assert f.counts() == (8, 8) and read_maps(f.client, f.maps) == history


def test_a_shrink_is_refused_with_the_reason_and_changes_nothing(fleet: Callable[..., Fleet]) -> None:
    f = fleet(placement="jump", hash_name="xxh3")
    line = one_error_line(f.run("--partitions", "4"))
    assert f"cannot grow {f.events!r} from 6 to 4 partitions: Kafka cannot remove partitions" in line
    assert "orphan the state" in line
    assert f.counts() == (6, 6) and read_maps(f.client, f.maps) == []


def test_mod_growth_is_refused_without_allow_reshuffle_and_a_missing_changelog_is_skipped(fleet: Callable[..., Fleet]) -> None:
    f = fleet(placement="mod", hash_name="murmur2", changelog=False)
    refused = f.run("--partitions", "8")
    line = one_error_line(refused)
    assert f"grow {f.events} from 6 to 8 partitions - refused" in refused.stdout
    assert "placement 'mod' moves about 75% of the keys from 6 to 8 partitions" in line
    assert "--allow-reshuffle" in line
    assert f.counts() == (6, None) and read_maps(f.client, f.maps) == []

    before = BUCKETS.bucket_of(int(time.time() * 1000)).label
    dry = f.run("--partitions", "8", "--dry-run")  # a dry run succeeds, and says what a real run would do
    after = BUCKETS.bucket_of(int(time.time() * 1000)).label
    assert dry.returncode == 0 and dry.stderr == "", dry.stderr
    assert "75.0% of keys move" in dry.stdout and "a real run would be refused" in dry.stdout
    assert "--allow-reshuffle" in dry.stdout
    assert "1970" not in dry.stdout and "always (no map published: v1 from the settings)" in dry.stdout
    shown = next(line for line in dry.stdout.splitlines() if line.startswith("bucket now"))
    assert shown.split()[2] in {before, after}, shown

    done = f.run("--partitions", "8", "--allow-reshuffle")
    assert done.returncode == 0, done.stderr
    assert f"{f.changelog} does not exist: skipped" in done.stdout
    assert f.counts() == (8, None)
    assert [(m.version, m.partitions, m.placement) for m in read_maps(f.client, f.maps)] == [
        (1, 6, "mod"), (2, 8, "mod")]


def test_with_a_topic_template_grow_changes_the_map_and_the_changelog_and_roll_creates_later_buckets_with_the_new_count(
        kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    client = {"bootstrap.servers": kafka_bootstrap}
    prefix = f"grow-tpl-{uuid.uuid4().hex[:8]}."
    template = prefix + "{bucket}"
    maps = make_topic("grow-tpl-maps", partitions=1, config={"cleanup.policy": "compact"})
    v1 = RoutingMap(version=1, partitions=3, topic=template, placement="jump", hash="xxh3")
    publish_map(client, maps, v1, bucket_width_ms=BUCKETS.width_ms)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMS_")}
    app_id = f"tpl-{uuid.uuid4().hex[:6]}"
    env.update(STREAMS_BUCKET_WIDTH="1m", STREAMS_GRACE="10s", STREAMS_APP_ID=app_id)
    changelog = f"{app_id}-stage1-changelog"  # stage 1 writes to the changelog partition of each source partition
    setup = AdminClient(client)
    setup.create_topics([NewTopic(changelog, 3, 1)])[changelog].result(30)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "streams.cli", "topics", *args, "--bootstrap-server",
                               kafka_bootstrap, "--events-topic", template, "--routing-maps-topic", maps],
                              capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)

    try:
        grown = cli("grow", "--partitions", "5", "--json")
        assert grown.returncode == 0, grown.stderr
        plan = orjson.loads(grown.stdout)
        assert [t["name"] for t in plan["topics"]] == [changelog], plan["topics"]
        assert any("existing bucket topics keep their count" in n for n in plan["notes"]), plan["notes"]
        assert not [t for t in topics_now(kafka_bootstrap) if t.startswith(prefix)]
        assert len(AdminClient(client).list_topics(changelog, timeout=15).topics[changelog].partitions) == 5
        history = read_maps(client, maps)
        assert [(m.version, m.partitions) for m in history] == [(1, 3), (2, 5)]
        switch = history[1].first_bucket_ms

        def roll_at(now_ms: int) -> dict:
            result = cli("roll", "--template", template, "--ahead", "1", "--retention", "1h", "--now", str(now_ms),
                         "--json")
            assert result.returncode == 0, result.stderr
            return orjson.loads(result.stdout)  # type: ignore[no-any-return]

        before = roll_at(switch - 2 * BUCKETS.width_ms)  # the two buckets before the switch: v1's count
        across = roll_at(switch - BUCKETS.width_ms)  # the last v1 bucket exists; the switch bucket gets v2's
        label = BUCKETS.label_of
        assert before["created"] == [prefix + label(switch - 120_000), prefix + label(switch - 60_000)]
        assert across["created"] == [prefix + label(switch)]
        parts = {t: len(md.partitions) for t, md in AdminClient(client).list_topics(timeout=15).topics.items()
                 if t.startswith(prefix)}
        assert parts == {prefix + label(switch - 120_000): 3, prefix + label(switch - 60_000): 3,
                         prefix + label(switch): 5}
    finally:
        ours = [t for t in topics_now(kafka_bootstrap) if t.startswith(prefix) or t == changelog]
        if ours:
            admin = AdminClient(client)
            for fut in admin.delete_topics(ours).values():
                fut.result(30)
