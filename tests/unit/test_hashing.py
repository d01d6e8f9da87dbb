"""Canonical key bytes, Kafka's murmur2, xxh3, SHA-256 shards and jump consistent hash."""

from __future__ import annotations

import hashlib
import random
import unicodedata
import uuid

import pytest
import xxhash
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.core.errors import InvalidKeyError
from streams.core.routing.hashing import (
    MAX_KEY_BYTES,
    MURMUR2_IMPLEMENTATION,
    canonical_key,
    jump_hash,
    kafka_partition,
    murmur2,
    murmur2_partitioner,
    murmur2_reference,
    portable_shard,
    sha256_64,
    sha256_int,
    xxh3_64,
)

# Apache Kafka, clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java, testMurmur2.
KAFKA_MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}

# github.com/dgryski/go-jump jump_test.go ("generated from the reference C++ code"):
# key -> [jump_hash(key, n) for n = 1, 2, ...].
GO_JUMP_VECTORS = {
    0: [0] * 20,
    1: [0, 0, 0, 0, 0, 0, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 17, 17],
    0xDEADBEEF: [0, 1, 2, 3, 3, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 16, 16, 16],
    0x0DDC0FFEEBADF00D: [0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 15, 15, 15, 15],
}
# github.com/lithammer/python-jump-consistent-hash tests/test_jump.py: (key, n, bucket).
PY_JUMP_VECTORS = [(1, 1, 0), (42, 57, 43), (0xDEAD10CC, 1, 0), (0xDEAD10CC, 666, 361), (256, 1024, 520)]

UUID = uuid.UUID("0190a0b1-7c2d-7abc-8def-0123456789ab")


# --- murmur2 -----------------------------------------------------------------------


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2_VECTORS.items())
def test_murmur2_reproduces_kafkas_unit_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected
    assert murmur2_reference(data) == expected


def test_the_compiled_murmur2_passed_its_import_check() -> None:
    assert MURMUR2_IMPLEMENTATION == "murmurhash2"


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_compiled_murmur2_equals_the_pure_python_reference(data: bytes) -> None:
    assert murmur2(data) == murmur2_reference(data)
    assert -(2**31) <= murmur2(data) < 2**31


def test_kafka_partition_agrees_with_aiokafkas_default_partitioner_on_random_keys() -> None:
    rng = random.Random(20260101)
    partitioner = DefaultPartitioner()
    for _ in range(5_000):
        key = rng.randbytes(rng.randint(1, 64))
        n = rng.randint(1, 200)
        partitions = list(range(n))
        assert kafka_partition(key, n) == partitioner(key, partitions, partitions)
        assert murmur2_partitioner(n)(key) == kafka_partition(key, n)


def test_kafka_partition_of_foobar_over_50_partitions_is_16() -> None:
    # (-790332482 & 0x7fffffff) % 50, worked by hand: 1357151166 % 50 = 16.
    assert kafka_partition(b"foobar", 50) == 16


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_kafka_partition_rejects_a_partition_count_below_one_or_not_an_int(bad: object) -> None:
    with pytest.raises(ValueError):
        kafka_partition(b"k", bad)  # type: ignore[arg-type]


def test_murmur2_rejects_text() -> None:
    with pytest.raises(TypeError):
        murmur2("abc")  # type: ignore[arg-type]


# --- canonical bytes -------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        str(UUID),
        str(UUID).upper(),
        UUID.hex,
        UUID.hex.upper(),
        "{" + str(UUID) + "}",
        "{" + str(UUID).upper() + "}",
        "urn:uuid:" + str(UUID),
        "URN:UUID:" + str(UUID).upper(),
        UUID,
        UUID.bytes,
        bytearray(UUID.bytes),
    ],
)
def test_every_spelling_of_one_uuid_gives_its_16_bytes(spelling: object) -> None:
    assert canonical_key(spelling) == UUID.bytes


def test_upper_lower_braces_urn_and_hyphenless_uuid_spellings_route_identically() -> None:
    spellings = [str(UUID), str(UUID).upper(), UUID.hex, "{" + str(UUID) + "}", "urn:uuid:" + str(UUID)]
    assert {kafka_partition(canonical_key(s), 12) for s in spellings} == {kafka_partition(UUID.bytes, 12)}


@pytest.mark.parametrize(
    "text",
    [
        "0190a0b1-7c2d-7abc-8def-0123456789aX",  # not hex
        "0190a0b17-c2d-7abc-8def-0123456789ab",  # hyphen out of place
        "0190a0b1-7c2d-7abc-8def-0123456789ab  ",  # 38 chars, no braces
        "(0190a0b1-7c2d-7abc-8def-0123456789ab)",
        "urn:uuix:0190a0b1-7c2d-7abc-8def-0123456789ab",
        "0190a0b1 7c2d 7abc 8def 0123456789ab",  # spaces: bytes.fromhex would skip them
        "0190a0b17c2d7abc8def0123456789a ",
        "+190a0b17c2d7abc8def0123456789ab",
    ],
)
def test_strings_merely_shaped_like_uuids_stay_text(text: str) -> None:
    assert canonical_key(text) == text.encode()


def test_text_is_utf8_verbatim_without_stripping_or_normalising() -> None:
    assert canonical_key("tenant-1") == b"tenant-1"
    assert canonical_key(" tenant-1") != canonical_key("tenant-1")
    assert canonical_key("Tenant-1") != canonical_key("tenant-1")
    composed, decomposed = "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")
    assert canonical_key(composed) == composed.encode("utf-8") != canonical_key(decomposed)


def test_an_int_routes_like_its_decimal_text() -> None:
    assert canonical_key(42) == canonical_key("42") == b"42"
    assert canonical_key(-7) == b"-7"
    assert canonical_key(2**70) == str(2**70).encode()


def test_other_bytes_pass_through_and_subclasses_are_accepted() -> None:
    class Name(str):
        pass

    assert canonical_key(b"\x00\xff") == b"\x00\xff"
    assert canonical_key(memoryview(b"abc")) == b"abc"
    assert canonical_key(Name("abc")) == b"abc"


@pytest.mark.parametrize(
    ("bad", "type_name"),
    [(None, "NoneType"), ("", "str"), (b"", "bytes"), (bytearray(), "bytes"), (True, "bool"), (1.5, "float"),
     ([1], "list"), (object(), "object")],
)
def test_missing_empty_and_unsupported_keys_raise_naming_the_type(bad: object, type_name: str) -> None:
    with pytest.raises(InvalidKeyError, match=type_name):
        canonical_key(bad)


def test_text_with_a_lone_surrogate_raises_invalid_key() -> None:
    with pytest.raises(InvalidKeyError):
        canonical_key("a\ud800b")


def test_an_int_too_long_for_decimal_text_raises_invalid_key() -> None:
    with pytest.raises(InvalidKeyError):
        canonical_key(10**5000)


@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1).filter(
    lambda t: len(t) not in (32, 36, 38, 45)))
def test_text_of_any_length_a_uuid_cannot_have_is_its_utf8(text: str) -> None:
    assert canonical_key(text) == text.encode("utf-8")


@given(st.uuids())
def test_any_uuid_gives_the_same_bytes_in_every_spelling(u: uuid.UUID) -> None:
    spellings = {str(u), str(u).upper(), u.hex, "{%s}" % u, "urn:uuid:%s" % u, u, u.bytes}
    assert {canonical_key(s) for s in spellings} == {u.bytes}


# --- xxh3, sha256 ------------------------------------------------------------------------


def test_xxh3_64_is_xxhashs_seedless_64_bit_digest() -> None:
    assert xxh3_64(b"tenant-1") == xxhash.xxh3_64(b"tenant-1").intdigest()
    assert xxh3_64(b"") == 0x2D06800538D394C2  # XXH3_64bits of empty input, from the xxHash sanity tests


def test_portable_shard_is_sha256_of_canonical_bytes_big_endian_modulo_n() -> None:
    for value, raw, n in [("tenant-1", b"tenant-1", 12), (UUID, UUID.bytes, 7), (42, b"42", 1000)]:
        digest = hashlib.sha256(raw).hexdigest()
        assert portable_shard(value, n) == int(digest, 16) % n
        assert sha256_int(raw) == int(digest, 16)
        assert sha256_64(raw) == int(digest[:16], 16)


def test_portable_shard_of_a_uuid_is_the_same_in_every_spelling() -> None:
    assert portable_shard(str(UUID).upper(), 97) == portable_shard(UUID, 97) == portable_shard(UUID.hex, 97)


def test_portable_shard_rejects_zero_shards() -> None:
    with pytest.raises(ValueError):
        portable_shard("k", 0)


# --- jump consistent hash ----------------------------------------------------------------


@pytest.mark.parametrize(("key", "expected"), GO_JUMP_VECTORS.items())
def test_jump_hash_matches_the_go_jump_package_vectors(key: int, expected: list[int]) -> None:
    assert [jump_hash(key, n) for n in range(1, len(expected) + 1)] == expected


@pytest.mark.parametrize(("key", "n", "expected"), PY_JUMP_VECTORS)
def test_jump_hash_matches_the_python_jump_consistent_hash_vectors(key: int, n: int, expected: int) -> None:
    assert jump_hash(key, n) == expected


def test_jump_hash_takes_the_key_modulo_2_to_the_64() -> None:
    assert jump_hash(-1, 1000) == jump_hash(2**64 - 1, 1000)
    assert jump_hash(2**64 + 42, 57) == 43


@pytest.mark.parametrize("bad", [0, -3, True, 1.0])
def test_jump_hash_needs_at_least_one_bucket(bad: object) -> None:
    with pytest.raises(ValueError):
        jump_hash(1, bad)  # type: ignore[arg-type]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 64), st.integers(0, 2**32))
def test_growing_n_to_n_plus_1_moves_only_keys_to_the_new_bucket_about_1_in_n_plus_1(n: int, seed: int) -> None:
    rng = random.Random(seed)
    keys = [rng.getrandbits(64) for _ in range(4_000)]
    moved = 0
    for key in keys:
        before, after = jump_hash(key, n), jump_hash(key, n + 1)
        assert 0 <= before < n and 0 <= after < n + 1
        if before != after:
            assert after == n
            moved += 1
    # Binomial(4000, 1/(n+1)): five standard deviations either side.
    p = 1 / (n + 1)
    mean, sd = len(keys) * p, (len(keys) * p * (1 - p)) ** 0.5
    assert mean - 5 * sd <= moved <= mean + 5 * sd


@pytest.mark.parametrize("key", ["k" * (MAX_KEY_BYTES + 1), "é" * (MAX_KEY_BYTES // 2 + 1), b"\x01" * (MAX_KEY_BYTES + 1),
                                 int("9" * (MAX_KEY_BYTES + 1))])
def test_a_key_longer_than_max_key_bytes_is_refused_naming_the_limit(key: object) -> None:
    with pytest.raises(InvalidKeyError, match=str(MAX_KEY_BYTES)):
        canonical_key(key)
    assert canonical_key("k" * MAX_KEY_BYTES) == b"k" * MAX_KEY_BYTES  # the limit itself is fine
