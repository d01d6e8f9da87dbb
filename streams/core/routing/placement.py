"""Placement strategies: canonical key bytes -> a partition in ``[0, n)``.

One registry, :data:`PLACERS`, keyed by ``(placement, hash)``. Each entry builds the
placer for a partition count once, when a routing map is installed; the placer
itself does no checks, it is the hot path. Adding a strategy is one entry here and
one test: routing maps, settings, ``streams simulate`` and the CLI all read their
choices from this table.

* ``mod``: a hash value modulo n. With ``murmur2`` (``murmur2(key) & 0x7fffffff``)
  this is Kafka's own rule (Java client, aiokafka, librdkafka's ``murmur2_random``);
  growing N to N+1 moves about N/(N+1) of the keys.
* ``jump``: Lamping and Veach's jump consistent hash of a 64-bit hash value; growing
  N to N+1 moves about 1/(N+1) of the keys, all to the new partition.
* hashes: ``murmur2``; ``xxh3`` (``xxh3_64``, unsigned); ``sha256``, the slow
  portable reference (for ``mod`` the whole digest as a big-endian integer, for
  ``jump`` its first 8 bytes, big-endian).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import xxhash

from streams.core.errors import RoutingMapError
from streams.core.native import NATIVE
from streams.core.routing.hashing import (
    jump_hash,
    murmur2_partitioner,
    sha256_64,
    sha256_int,
)
from streams.core.validate import require_int

__all__ = ["HASHES", "MAX_PARTITIONS", "PLACEMENTS", "PLACERS", "Placer", "make_placer"]

#: The largest partition count a routing map may name.
MAX_PARTITIONS = 100_000

Placer = Callable[[bytes], int]

_xxh3 = xxhash.xxh3_64_intdigest
_murmur2_positive = murmur2_partitioner(0x8000_0000)  # (murmur2 & 0x7fffffff) % 2**31


def _mod_xxh3(n: int) -> Placer:
    return lambda key: _xxh3(key) % n


def _mod_sha256(n: int) -> Placer:
    return lambda key: sha256_int(key) % n


def _jump_murmur2_python(n: int) -> Placer:
    return lambda key: jump_hash(_murmur2_positive(key), n)


def _jump_xxh3_python(n: int) -> Placer:
    return lambda key: jump_hash(_xxh3(key), n)


def _native_jump(hash_name: str, python: Callable[[int], Placer]) -> Callable[[int], Placer]:
    """streams-native's jump placer for ``hash_name`` if it places every probe as ``python`` does, else ``python``."""
    if NATIVE is None:
        return python
    probes = (b"", b"a", b"abc", b"tenant-42", bytes(range(256)))
    if any(NATIVE.JumpPlacer(n, hash_name)(p) != python(n)(p) for p in probes for n in (1, 2, 12, 1000, 99_999)):
        return python
    return lambda n: NATIVE.JumpPlacer(n, hash_name)  # type: ignore[no-any-return, union-attr]


_jump_murmur2 = _native_jump("murmur2", _jump_murmur2_python)
_jump_xxh3 = _native_jump("xxh3", _jump_xxh3_python)


def _jump_sha256(n: int) -> Placer:
    return lambda key: jump_hash(sha256_64(key), n)


#: ``(placement, hash) -> factory(partitions) -> placer``.
PLACERS: dict[tuple[str, str], Callable[[int], Placer]] = {
    ("mod", "murmur2"): murmur2_partitioner,
    ("mod", "xxh3"): _mod_xxh3,
    ("mod", "sha256"): _mod_sha256,
    ("jump", "murmur2"): _jump_murmur2,
    ("jump", "xxh3"): _jump_xxh3,
    ("jump", "sha256"): _jump_sha256,
}
#: Placement names, in registry order.
PLACEMENTS: tuple[str, ...] = tuple(dict.fromkeys(placement for placement, _ in PLACERS))
#: Hash names, in registry order.
HASHES: tuple[str, ...] = tuple(dict.fromkeys(hash_name for _, hash_name in PLACERS))


@functools.lru_cache(maxsize=256)
def make_placer(hash_name: str, placement: str, partitions: int) -> Placer:
    """Return ``f(canonical_key_bytes) -> partition in [0, partitions)`` from :data:`PLACERS`.

    Cached per argument triple. Raises RoutingMapError for an unknown hash or
    placement, or a partition count that is not an int in 1..MAX_PARTITIONS.
    """
    require_int("partitions", partitions, 1, MAX_PARTITIONS, RoutingMapError)
    factory = PLACERS.get((placement, hash_name))
    if factory is None:
        if placement not in PLACEMENTS:
            raise RoutingMapError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
        raise RoutingMapError(f"hash must be one of {HASHES}, got {hash_name!r}")
    return factory(partitions)
