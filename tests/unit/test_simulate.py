"""The offline simulation: seeded workloads, and a report that matches a direct computation."""

from __future__ import annotations

import itertools
import math
import uuid
from collections import Counter
from pathlib import Path

import orjson
import pytest

from streams.core.errors import ConfigError, RoutingMapError
from streams.core.hotkeys.decider import BalanceDecider, BalancePolicy
from streams.core.hotkeys.sketch import MergedView
from streams.core.routing.directory import salt_for
from streams.core.routing.hashing import canonical_key
from streams.core.routing.placement import make_placer
from streams.core.simulate import (
    Workload,
    expected_loads,
    generate_keys,
    iter_keys,
    read_keys,
    simulate,
)


def direct_loads(keys: list[str], partitions: int, placement: str, hash_name: str,
                 directory: dict[str, tuple[int, ...]] | None = None) -> list[int]:
    """Loads computed without the Router: placer + the directory rule of streams.core.routing.directory."""
    place = make_placer(hash_name, placement, partitions)
    placed = {canonical_key(k): parts for k, parts in (directory or {}).items()}
    loads = [0] * partitions
    for event_id, key in enumerate(keys):
        kb = canonical_key(key)
        parts = placed.get(kb)
        loads[place(kb) if parts is None else parts[salt_for(event_id, len(parts))]] += 1
    return loads


# --- workloads ---------------------------------------------------------------------------


def test_the_same_seed_draws_the_same_keys_and_another_seed_does_not() -> None:
    a = generate_keys(Workload("zipf", keys=500, seed=4), 5000)
    assert a == generate_keys(Workload("zipf", keys=500, seed=4), 5000)
    assert a != generate_keys(Workload("zipf", keys=500, seed=5), 5000)


@pytest.mark.parametrize("distribution", ["uniform", "zipf", "tenants"])
def test_the_endless_stream_begins_with_exactly_the_generated_keys(distribution: str) -> None:
    workload = Workload(distribution, keys=300, seed=9)
    assert list(itertools.islice(iter_keys(workload), 10_001)) == generate_keys(workload, 10_001)


def test_zipf_weights_are_the_power_law_of_the_rank() -> None:
    cum = Workload("zipf", keys=50, zipf_exponent=1.3).cumulative_weights()
    weights = [b - a for a, b in zip([0.0] + cum, cum)]
    assert weights == pytest.approx([1 / r ** 1.3 for r in range(1, 51)], rel=1e-12)


def test_zipf_key_counts_match_their_expected_share_within_five_sigma() -> None:
    n, events, s = 100, 200_000, 1.0
    counts = Counter(generate_keys(Workload("zipf", keys=n, zipf_exponent=s, seed=1), events))
    harmonic = sum(1 / r ** s for r in range(1, n + 1))
    for rank in range(1, 11):
        p = (1 / rank ** s) / harmonic
        sigma = math.sqrt(events * p * (1 - p))
        assert abs(counts[f"key-{rank - 1}"] - events * p) < 5 * sigma, rank
    assert counts.most_common(1)[0][0] == "key-0"


def test_tenants_give_the_elephants_their_share_and_the_rest_the_remainder_evenly() -> None:
    workload = Workload("tenants", keys=1000, elephants=4, elephant_share=0.4, seed=2)
    cum = workload.cumulative_weights()
    weights = [b - a for a, b in zip([0.0] + cum, cum)]
    assert weights[:4] == pytest.approx([0.1] * 4)
    assert weights[4:] == pytest.approx([0.6 / 996] * 996)
    keys = generate_keys(workload, 100_000)
    elephant_events = sum(1 for k in keys if k in {"tenant-0", "tenant-1", "tenant-2", "tenant-3"})
    sigma = math.sqrt(100_000 * 0.4 * 0.6)
    assert abs(elephant_events - 40_000) < 5 * sigma


def test_uniform_draws_every_key_about_equally() -> None:
    counts = Counter(generate_keys(Workload("uniform", keys=100, seed=3), 100_000))
    assert set(counts) == {f"key-{i}" for i in range(100)}
    sigma = math.sqrt(100_000 * 0.01 * 0.99)
    assert max(abs(c - 1000) for c in counts.values()) < 5 * sigma


@pytest.mark.parametrize(("fields", "named"), [
    ({"distribution": "pareto"}, "distribution"),
    ({"keys": 0}, "keys"),
    ({"keys": True}, "keys"),
    ({"distribution": "zipf", "zipf_exponent": 0}, "zipf_exponent"),
    ({"distribution": "zipf", "zipf_exponent": float("nan")}, "zipf_exponent"),
    ({"distribution": "tenants", "keys": 5, "elephants": 5}, "elephants"),
    ({"distribution": "tenants", "elephant_share": 1.5}, "elephant_share"),
    ({"seed": 1.5}, "seed"),
])
def test_a_workload_with_a_bad_field_is_refused_naming_the_field(fields: dict, named: str) -> None:
    with pytest.raises(ConfigError, match=f"^{named} must be"):
        Workload(**fields)


# --- reading keys -------------------------------------------------------------------------


def test_a_keys_file_gives_one_key_per_line_verbatim_skipping_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_bytes(b"alpha\r\n beta \n\n\xc3\xa9t\xc3\xa9\ngamma")
    got = read_keys(path)
    assert got.keys == ("alpha", " beta ", "été", "gamma")
    assert got.skipped == 1


def test_a_csv_column_is_read_by_its_header(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    path.write_text('ts,user,amount\n1,"u,1",3\n2,,4\n3,u2,5\n')
    got = read_keys(path, "user")
    assert got.keys == ("u,1", "u2")
    assert got.skipped == 1


def test_a_missing_csv_column_is_refused_listing_the_columns(tmp_path: Path) -> None:
    path = tmp_path / "events.csv"
    path.write_text("ts,user\n1,a\n")
    with pytest.raises(ConfigError, match=r"no column 'tenant' \(columns: ts, user\)"):
        read_keys(path, "tenant")


@pytest.mark.parametrize("content", [b"", b"\n\n", b"\xff\xfe key\n"])
def test_an_empty_or_non_utf8_keys_file_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "keys.txt"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match="keys file"):
        read_keys(path)


# --- the simulation -------------------------------------------------------------------------


@pytest.mark.parametrize(("placement", "hash_name"), [("mod", "murmur2"), ("jump", "xxh3"), ("mod", "sha256")])
def test_loads_before_and_after_equal_a_direct_computation_with_the_same_directory(placement: str,
                                                                                   hash_name: str) -> None:
    keys = generate_keys(Workload("zipf", keys=400, zipf_exponent=1.3, seed=11), 30_000)
    report = simulate(keys, partitions=12, placement=placement, hash=hash_name, window_s=10.0)
    directory = {p.key: p.partitions for p in report.placed}
    assert directory, "the workload must be unbalanced for this test to mean anything"
    assert list(report.before.counts) == direct_loads(keys, 12, placement, hash_name)
    assert list(report.after.counts) == direct_loads(keys, 12, placement, hash_name, directory)
    assert report.before.total == report.after.total == len(keys) == report.events
    assert report.before.max_over_mean == max(report.before.counts) / (len(keys) / 12)
    assert report.policy.balance_target < report.before.max_over_mean
    # What is left above the target is counting noise: no partition is hot beyond it.
    judge = BalanceDecider(report.policy, home=lambda key: 0)
    assert judge.hot_partitions([c / 10.0 for c in report.after.counts], 10.0, report.policy.balance_target) == []
    assert report.after.max_over_mean < 1.15
    assert all(p.home == make_placer(hash_name, placement, 12)(canonical_key(p.key)) for p in report.placed)


def test_the_simulation_runs_the_workers_decider_on_exact_counts() -> None:
    keys = generate_keys(Workload("zipf", keys=2000, zipf_exponent=1.1, seed=3), 50_000)
    report = simulate(keys, partitions=8, window_s=10.0)
    counts = Counter(keys)
    loads = [c / 10.0 for c in report.before.counts]
    rates = {key: c / 10.0 for key, c in counts.items()}
    decider = BalanceDecider(report.policy, home=lambda key: make_placer("murmur2", "mod", 8)(canonical_key(key)))
    view = MergedView(instances=("x",), window_s=10.0, total=len(keys), total_rate=len(keys) / 10.0, rates=rates,
                      unreported_rate=0.0, at_s=0.0, partition_rates=dict(enumerate(loads)))
    first_round = {d.key: d.partitions for d in decider.decide(view, 0.0)}
    assert first_round and report.rounds >= 1
    if report.rounds == 1:
        assert {p.key: p.partitions for p in report.placed} == first_round
    for p in report.placed:
        assert (p.count, p.rate, p.share) == (counts[p.key], counts[p.key] / 10.0, counts[p.key] / len(keys))


def test_placed_keys_are_reported_heaviest_first_with_home_and_partitions() -> None:
    keys = ["whale"] * 6000 + ["seal"] * 3000 + [f"fish-{i}" for i in range(1000)]
    report = simulate(keys, partitions=8, window_s=20.0)
    whale = report.placed[0]
    assert whale.key == "whale" and whale.count == 6000 and whale.rate == 300.0 and whale.share == 0.6
    assert len(whale.partitions) >= 5  # 300/s where a partition's fair share is 62.5/s
    assert [p.count for p in report.placed] == sorted((p.count for p in report.placed), reverse=True)
    assert report.after.max_over_mean < report.before.max_over_mean


def test_a_split_key_lands_on_exactly_its_chosen_partitions() -> None:
    keys = ["whale"] * 8000 + [f"fish-{i}" for i in range(2000)]
    report = simulate(keys, partitions=6, window_s=10.0)
    (whale,) = report.placed
    fish = direct_loads(keys[8000:], 6, "mod", "murmur2")
    whale_share = [s - f for s, f in zip(report.after.counts, fish)]
    assert {p for p, n in enumerate(whale_share) if n} == set(whale.partitions)
    assert sum(whale_share) == 8000


def test_uniform_keys_are_left_to_the_hash() -> None:
    keys = [str(uuid.UUID(int=i * 7919 + 1)) for i in range(60_000)]
    report = simulate(keys, partitions=12)
    assert report.placed == () and report.after == report.before and report.rounds == 0


def test_splits_only_and_an_off_decider_are_honoured() -> None:
    keys = generate_keys(Workload("zipf", keys=2000, zipf_exponent=1.1, seed=3), 50_000)
    splits_only = simulate(keys, partitions=8, policy=BalancePolicy(partitions=8, allow_moves=False))
    assert splits_only.placed and all(len(p.partitions) >= 2 for p in splits_only.placed)
    off = simulate(keys, partitions=8, policy=BalancePolicy(partitions=8, enabled=False))
    assert off.placed == () and off.after == off.before


def test_growth_counts_exactly_the_keys_whose_partition_changes() -> None:
    keys = [f"device-{i}" for i in range(20_000)] + ["device-0"] * 5000
    report = simulate(keys, partitions=10, hash="xxh3")
    g = report.growth
    for movement in (g.mod, g.jump):
        before = make_placer("xxh3", movement.placement, 10)
        after = make_placer("xxh3", movement.placement, 11)
        moved = {f"device-{i}" for i in range(20_000) if before(f"device-{i}".encode()) != after(f"device-{i}".encode())}
        assert movement.moved_keys == len(moved)
        assert movement.moved_events == len(moved) + (5000 if "device-0" in moved else 0)
        assert movement.distinct_keys == 20_000 and movement.events == 25_000
    assert g.ideal_fraction == 1 / 11
    assert abs(g.jump.fraction - 1 / 11) < 0.01
    assert abs(g.mod.fraction - 10 / 11) < 0.01


def test_one_partition_has_nothing_to_balance() -> None:
    report = simulate(["a"] * 1000 + ["b"], partitions=1)
    assert report.placed == () and report.after == report.before and report.before.counts == (1001,)


def test_two_spellings_of_one_uuid_are_one_key() -> None:
    u = uuid.UUID("017f22e2-79b0-7cc3-98c4-dc0c0c07398f")
    keys = [str(u)] * 3000 + [str(u).upper().replace("-", "")] * 3000 + [f"k{i}" for i in range(500)]
    report = simulate(keys, partitions=4, window_s=10.0)
    assert report.distinct_keys == 501
    assert (report.placed[0].key, report.placed[0].count) == (str(u), 6000)


def test_the_json_record_carries_the_same_numbers_as_the_report() -> None:
    keys = generate_keys(Workload("tenants", keys=200, elephants=2, elephant_share=0.5, seed=1), 10_000)
    report = simulate(keys, partitions=5, placement="jump", source="tenants")
    record = orjson.loads(orjson.dumps(report.to_record()))
    assert record["before"]["loads"] == list(report.before.counts)
    assert record["after"]["max"] == report.after.max
    assert record["placed"] == [{"key": p.key, "count": p.count, "rate": p.rate, "share": p.share, "home": p.home,
                                 "partitions": list(p.partitions), "kind": "move" if len(p.partitions) == 1 else "split"}
                                for p in report.placed]
    assert record["touched_keys"] == len(report.placed)
    assert record["growth"]["jump"]["moved_keys"] == report.growth.jump.moved_keys
    assert record["policy"]["balance_target"] == report.policy.balance_target


def test_bad_simulation_inputs_are_refused() -> None:
    with pytest.raises(ConfigError, match="keys must be at least one key"):
        simulate([], partitions=4)
    with pytest.raises(ConfigError, match="window_s"):
        simulate(["a"], partitions=4, window_s=0)
    with pytest.raises(RoutingMapError, match="partitions"):
        simulate(["a"], partitions=0)
    with pytest.raises(RoutingMapError, match="placement"):
        simulate(["a"], partitions=4, placement="ring")


def test_expected_loads_are_the_long_run_shares_of_the_drawn_keys_under_a_directory() -> None:
    workload = Workload("zipf", keys=200, zipf_exponent=1.1, seed=3)
    home = {workload.key_name(i): i % 4 for i in range(200)}.__getitem__
    directory = {"key-0": (1, 2, 3), "key-1": (0,), "not-drawn": (3,)}
    loads = expected_loads(workload, 4, home, directory)
    assert sum(loads) == pytest.approx(1.0)
    drawn = Counter()
    for key in itertools.islice(iter_keys(workload), 300_000):
        parts = directory.get(key, (home(key),))
        for p in parts:
            drawn[p] += 1 / len(parts)
    for p in range(4):  # 300,000 draws: a share's standard deviation is under 0.001
        assert loads[p] == pytest.approx(drawn[p] / 300_000, abs=0.005)


def test_expected_loads_refuse_a_partition_out_of_range() -> None:
    workload = Workload("uniform", keys=6)
    assert expected_loads(workload, 3, lambda key: int(key[4:]) % 3, {}) == pytest.approx([1 / 3] * 3)
    with pytest.raises(ConfigError, match="partition"):
        expected_loads(workload, 3, lambda key: 0, {"key-1": (3,)})
