"""Growing a keyed topic: the pure plan behind ``streams topics grow``.

A grow adds partitions to the events topic now and publishes a new routing map
(version + 1, the new count, the same topic, placement and hash) that takes effect
at a later bucket boundary, so every producer switches at the same event time and no
key straddles two partitions inside one bucket. :func:`plan_growth` works out that
boundary and how much moves:

* **effective bucket**: the first bucket start at or after ``now + lead`` (and after
  the current map's first bucket). The lead defaults to one bucket width plus grace
  (:func:`default_lead_ms`): every producer then has a whole bucket to read the new
  map before it applies, and the bucket in which the partitions were added is closed
  before any event is routed by the new map. A shorter lead is allowed, never less
  than grace + 1 s (:data:`MIN_LEAD_OVER_GRACE_MS`): a map must not apply to a bucket
  that may still be open for late events when it is published.
* **keys moved**: the share of a key sample whose partition differs under the two
  maps, computed with the maps' own placers (the sample is a keys file, the sketch's
  heavy keys, or :func:`synthetic_keys`, a uniform sample of 100,000 keys).
* **traffic moved**: the same, weighted by each key's rate (from the hot-key sketch),
  with the rate no listed key explains (``other_weight``) assumed to move at the
  uniform expectation, :func:`expected_moved_fraction`: ``1 - n/m`` for ``jump``,
  ``1 - gcd(n, m)/m`` for ``mod`` (a key stays iff ``h % n == h % m``, i.e. ``h mod
  lcm(n, m) < n``).

Imports no Kafka client; the edge (:mod:`streams.cli.topics`) reads the maps, the
sketches and the clock and carries the plan out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from streams.core.errors import ConfigError, RoutingMapError
from streams.core.hotkeys.sketch import SketchSummary, merge_summaries
from streams.core.routing.hashing import canonical_key
from streams.core.routing.placement import MAX_PARTITIONS, make_placer
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.core.time.eventtime import check_ms
from streams.core.validate import require_int

__all__ = [
    "MIN_LEAD_OVER_GRACE_MS",
    "SYNTHETIC_KEYS",
    "GrowthPlan",
    "default_lead_ms",
    "expected_moved_fraction",
    "plan_growth",
    "sketch_weights",
    "synthetic_keys",
]

#: How many keys the synthetic uniform sample holds.
SYNTHETIC_KEYS = 100_000
#: The shortest lead allowed is grace plus this.
MIN_LEAD_OVER_GRACE_MS = 1_000


@dataclass(frozen=True)
class GrowthPlan:
    """What a grow from ``current`` to ``new`` will do.

    ``new.first_bucket_ms`` is the effective bucket's start (``effective_label`` its
    label); ``sampled_keys`` distinct keys (by canonical bytes) were placed under both
    maps and ``moved_keys`` of them change partition; ``traffic_fraction`` is the
    rate-weighted share that moves, None when no weights were given;
    ``expected_fraction`` is the share a uniform hash moves (see the module docstring).
    """

    current: RoutingMap
    new: RoutingMap
    effective_label: str
    lead_ms: int
    sampled_keys: int
    moved_keys: int
    expected_fraction: float
    traffic_fraction: float | None

    @property
    def key_fraction(self) -> float:
        """``moved_keys / sampled_keys`` (0.0 for an empty sample)."""
        return self.moved_keys / self.sampled_keys if self.sampled_keys else 0.0


def default_lead_ms(buckets: TimeBuckets) -> int:
    """One bucket width plus grace: the lead a grow gives producers unless told otherwise."""
    return buckets.width_ms + buckets.grace_ms


def expected_moved_fraction(placement: str, n: int, m: int) -> float:
    """The share of uniformly hashed keys whose partition changes from ``n`` to ``m`` partitions.

    ``jump``: ``1 - n/m`` for m >= n (keys only move to the new partitions).
    ``mod``: ``1 - gcd(n, m)/m``. Raises RoutingMapError for another placement or a
    count outside 1..MAX_PARTITIONS.
    """
    for name, count in (("n", n), ("m", m)):
        require_int(f"partition count {name}", count, 1, MAX_PARTITIONS, RoutingMapError)
    if placement == "jump":
        return 1 - min(n, m) / max(n, m)
    if placement == "mod":
        return 1 - math.gcd(n, m) / m
    raise RoutingMapError(f"placement must be 'mod' or 'jump', got {placement!r}")


def synthetic_keys(count: int = SYNTHETIC_KEYS) -> list[str]:
    """``key-0 … key-{count-1}``: a uniform key sample (the hash spreads them as it spreads real keys)."""
    return [f"key-{i}" for i in range(count)]


def sketch_weights(summaries: Iterable[SketchSummary]) -> tuple[dict[str, float], float]:
    """The heavy keys' rates (events/s) of the latest summary of each instance, and the rate left unexplained.

    The summaries are merged as the decider merges them (latest per instance, those
    older than three windows before the newest dropped). Each listed key's rate is
    the sketch's upper bound; the unexplained rate is the merged total rate minus
    their sum, never below 0. Empty input gives ``({}, 0.0)``.
    """
    summaries = list(summaries)
    if not summaries:
        return {}, 0.0
    newest = max(s.at_s for s in summaries)
    window = max(s.window_s for s in summaries)
    view = merge_summaries(summaries, now_s=newest, max_age_s=3 * window + 1)
    rates = {key: rate for key, rate in view.rates.items() if rate > 0}
    return rates, max(0.0, view.total_rate - sum(rates.values()))


def plan_growth(
    current: RoutingMap,
    new_partitions: int,
    *,
    now_ms: int,
    buckets: TimeBuckets,
    lead_ms: int | None = None,
    keys: Iterable[object] | None = None,
    weights: Mapping[object, float] | None = None,
    other_weight: float = 0.0,
) -> GrowthPlan:
    """Plan growing ``current`` to ``new_partitions``; pure, reads no clock.

    ``keys`` is the sample whose movement is measured (default :func:`synthetic_keys`);
    ``weights`` maps keys to rates for the traffic fraction, ``other_weight`` is the
    rate no key of ``weights`` explains (moves at :func:`expected_moved_fraction`).
    ``lead_ms`` defaults to :func:`default_lead_ms`. Raises RoutingMapError if
    ``new_partitions`` does not exceed ``current.partitions`` (Kafka cannot remove
    partitions, and fewer would move keys and orphan the state of the removed ones) or
    is above MAX_PARTITIONS; ConfigError for a lead under grace + 1 s or a negative
    weight; InvalidKeyError for a key that is not a routing key; InvalidBucketError for
    a bad ``now_ms``.
    """
    n = current.partitions
    if isinstance(new_partitions, int) and not isinstance(new_partitions, bool) and new_partitions <= n:
        same = new_partitions == n
        raise RoutingMapError(
            f"cannot grow {current.topic!r} from {n} to {new_partitions} partitions: "
            + (f"it already has {n}; give more than {n}" if same else
               "Kafka cannot remove partitions, and fewer partitions would move keys and orphan the state "
               "the workers keep for the removed ones"))
    require_int("new partition count", new_partitions, n + 1, MAX_PARTITIONS, RoutingMapError)
    now = check_ms(now_ms, "now_ms")
    lead = default_lead_ms(buckets) if lead_ms is None else lead_ms
    shortest = buckets.grace_ms + MIN_LEAD_OVER_GRACE_MS
    require_int(f"lead (at least grace + {MIN_LEAD_OVER_GRACE_MS // 1000} s = {shortest} ms)", lead, shortest)
    width = buckets.width_ms
    first = max(-(-(now + lead) // width) * width, current.first_bucket_ms + width)
    new = RoutingMap(version=current.version + 1, partitions=new_partitions, topic=current.topic,
                     placement=current.placement, hash=current.hash, first_bucket_ms=first)
    expected = expected_moved_fraction(current.placement, n, new_partitions)
    moves = _mover(current, new)
    sample = {canonical_key(key) for key in (synthetic_keys() if keys is None else keys)}
    moved = sum(1 for kb in sample if moves(kb))
    return GrowthPlan(current, new, buckets.label_of(first), lead, len(sample), moved, expected,
                      _traffic_fraction(moves, weights, other_weight, expected))


def _mover(current: RoutingMap, new: RoutingMap) -> Callable[[bytes], bool]:
    before = make_placer(current.hash, current.placement, current.partitions)
    after = make_placer(new.hash, new.placement, new.partitions)
    return lambda kb: before(kb) != after(kb)


def _traffic_fraction(moves: Callable[[bytes], bool], weights: Mapping[object, float] | None,
                      other_weight: float, expected: float) -> float | None:
    if not weights and not other_weight:
        return None
    per_key: dict[bytes, float] = {}
    for key, weight in (weights or {}).items():
        if not (isinstance(weight, (int, float)) and math.isfinite(weight) and weight >= 0):
            raise ConfigError(f"weight of key {key!r} must be a finite number >= 0, got {weight!r}")
        kb = canonical_key(key)
        per_key[kb] = per_key.get(kb, 0.0) + weight
    if not (math.isfinite(other_weight) and other_weight >= 0):
        raise ConfigError(f"other_weight must be a finite number >= 0, got {other_weight!r}")
    total = sum(per_key.values()) + other_weight
    if total <= 0:
        return None
    return (sum(w for kb, w in per_key.items() if moves(kb)) + other_weight * expected) / total
