"""Canonical key bytes and the hashes placement is built on.

Every hash in the project runs over *canonical bytes* (:func:`canonical_key`), so
one dimension value routes identically however it was spelled:

* a UUID in any spelling - ``uuid.UUID``; a str in upper or lower case, hyphenless
  (32 hex digits), hyphenated, in braces or as ``urn:uuid:``; or 16 raw bytes -
  becomes its 16 bytes. Note that *any* 16-byte ``bytes`` value counts as a UUID by
  this rule (it is already its canonical form), and so does any 32-hex-digit str:
  a hex MD5 digest becomes its 16 raw bytes, in either case;
* other text is its UTF-8, verbatim: no stripping, case folding or Unicode
  normalisation. Any of those would silently merge values the producer treats as
  distinct, and would disagree with Java and librdkafka producers that hash the raw
  UTF-8. Only UUID-shaped strings are rewritten, because their spellings are by
  definition one value;
* an int becomes the UTF-8 of its decimal text, so ``42`` and ``"42"`` route
  identically: a numeric ID often travels as a number in one producer and as text
  in another (JSON, CSV, a Java ``String.valueOf``), and both must find the same
  partition; decimal text is also what every other language produces unprompted;
* other bytes (``bytes``, ``bytearray``, ``memoryview``) pass through.

``None``, empty values, ``bool``, ``float`` and other types raise InvalidKeyError
naming the type; a missing key is never silently partition 0.

Because the kinds share one byte space, a 16-byte UTF-8 text and the UUID with those
bytes (or an int and its decimal str) share a key. Keep one kind per dimension.

Hashes: :func:`murmur2` is Kafka's (Java client, aiokafka, librdkafka's
``murmur2_random``), computed by the compiled ``murmurhash2`` package when it agrees
with the reference at import, else by :func:`murmur2_reference`; :func:`xxh3_64` is
the fast 64-bit hash for the project's own placement; :func:`portable_shard` is
SHA-256 modulo n, the reference any language can repeat; :func:`jump_hash` is
Lamping and Veach's jump consistent hash.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable

import xxhash

try:  # Rust's uuid crate parses the hyphenated and 32-digit spellings exactly as _uuid_str_bytes does, faster
    from uuid_utils import UUID as _CompiledUUID
except ImportError:  # pragma: no cover - _uuid_str_bytes stands in
    _CompiledUUID = None

from streams.core.errors import InvalidArgumentError, InvalidKeyError
from streams.core.native import NATIVE
from streams.core.validate import require_int

__all__ = [
    "MURMUR2_IMPLEMENTATION",
    "MAX_KEY_BYTES",
    "canonical_key",
    "fast_canonical_key",
    "jump_hash",
    "kafka_partition",
    "murmur2",
    "murmur2_partitioner",
    "murmur2_reference",
    "portable_shard",
    "sha256_64",
    "sha256_int",
    "xxh3_64",
]

_MURMUR2_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFF_FFFF_FFFF_FFFF
_UUID_STR_LENGTHS = frozenset((32, 36, 38, 45))
# Lengths canonical_key hands to the compiled parser (the braced and URN spellings stay
# with _uuid_str_bytes: the URN prefix is case-insensitive here, not in Rust's uuid crate).
_COMPILED_LENGTHS = frozenset((32, 36)) if _CompiledUUID is not None else frozenset()
#: Longest canonical key, in bytes: what workers' sketches, notices and the directory can carry.
MAX_KEY_BYTES = 1024
_URN_PREFIX = "urn:uuid:"


# --- canonical bytes -------------------------------------------------------------


def _uuid_str_bytes(text: str) -> bytes | None:
    """The 16 bytes of a UUID-shaped str, or None if ``text`` is not one.

    Shapes: 32 hex; 8-4-4-4-12 with hyphens; that in braces; that after
    ``urn:uuid:`` (prefix case-insensitive). Stricter than ``uuid.UUID()``, which
    also accepts stray hyphens and braces anywhere.
    """
    n = len(text)
    if n == 45:
        if text[:9].lower() != _URN_PREFIX:
            return None
        text = text[9:]
    elif n == 38:
        if text[0] != "{" or text[37] != "}":
            return None
        text = text[1:37]
    if len(text) == 36:
        if text[8] != "-" or text[13] != "-" or text[18] != "-" or text[23] != "-":
            return None
        # One call instead of five slices: a hyphen anywhere else leaves fewer than 32
        # digits, which the length check below refuses.
        text = text.replace("-", "")
    elif len(text) != 32:
        return None
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        return None
    # fromhex skips spaces between byte pairs; only 32 true hex digits give 16 bytes.
    return raw if len(raw) == 16 else None


def _canonical_slow(value: object) -> bytes:
    if value is None:
        raise InvalidKeyError("routing key is missing (got NoneType)")
    if isinstance(value, bool):
        raise InvalidKeyError("routing key must not be a bool (got bool)")
    if isinstance(value, str):
        return canonical_key(str(value))
    if isinstance(value, int):
        return canonical_key(int(value))
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, (bytearray, memoryview)):
        return canonical_key(bytes(value))
    raise InvalidKeyError(
        f"routing key must be str, bytes, int or uuid.UUID, got {type(value).__name__}"
    )


def canonical_key(value: object) -> bytes:
    """Return the canonical bytes of a routing key (see the module docstring).

    UUIDs in any spelling give their 16 bytes; other str gives its UTF-8 verbatim;
    int gives its decimal text; bytes pass through. Raises InvalidKeyError, naming
    the type, for None, bool, float, other types, empty values, and text that is
    not encodable as UTF-8 (lone surrogates), and keys over MAX_KEY_BYTES bytes.
    """
    cls = value.__class__
    if cls is str:
        n = len(value)  # type: ignore[arg-type]
        if n in _COMPILED_LENGTHS:
            # 8-4-4-4-12 or 32 hex digits, nothing else, as _uuid_str_bytes: a third of its cost
            try:
                return _CompiledUUID(value).bytes  # type: ignore[misc, no-any-return]
            except ValueError:  # not UUID-shaped (also a lone surrogate's UnicodeEncodeError): text
                pass
        elif n in _UUID_STR_LENGTHS:
            raw = _uuid_str_bytes(value)  # type: ignore[arg-type]
            if raw is not None:
                return raw
        if not value:
            raise InvalidKeyError("routing key is empty (got empty str)")
        try:
            raw = value.encode()  # type: ignore[attr-defined]
        except UnicodeEncodeError as exc:
            raise InvalidKeyError(f"routing key str is not valid UTF-8 text: {exc}") from None
        if len(raw) > MAX_KEY_BYTES:
            raise InvalidKeyError(f"routing key is {len(raw)} bytes of UTF-8, at most {MAX_KEY_BYTES}")
        return raw  # type: ignore[no-any-return]
    if cls is bytes:
        if not value:
            raise InvalidKeyError("routing key is empty (got empty bytes)")
        if len(value) > MAX_KEY_BYTES:  # type: ignore[arg-type]
            raise InvalidKeyError(f"routing key is {len(value)} bytes, at most {MAX_KEY_BYTES}")  # type: ignore[arg-type]
        return value  # type: ignore[return-value]
    if cls is int:
        try:
            raw = b"%d" % value  # type: ignore[str-format]
        except ValueError as exc:  # more digits than sys.get_int_max_str_digits()
            raise InvalidKeyError(f"routing key int is too large: {exc}") from None
        if len(raw) > MAX_KEY_BYTES:
            raise InvalidKeyError(f"routing key int has {len(raw)} digits, at most {MAX_KEY_BYTES}")
        return raw
    if cls is uuid.UUID:
        return value.bytes  # type: ignore[attr-defined, no-any-return]
    return _canonical_slow(value)


_CANONICAL_PROBES: tuple[object, ...] = (
    "tenant-42", "", "x" * MAX_KEY_BYTES, "x" * (MAX_KEY_BYTES + 1), "caf\u00e9", "\ud800", "0" * 32, "0" * 36,
    "017F22E2-79B0-7CC3-98C4-DC0C0C07398F", "017f22e279b07cc398c4dc0c0c07398f",
    "{017f22e2-79b0-7cc3-98c4-dc0c0c07398f}", "URN:uuid:017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
    "017f22e2-79b0-7cc3-98c4-dc0c0c07398g", "017f22e2-79b07-cc3-98c4-dc0c0c07398f", "{017f22e279b07cc398c4dc0c0c07398f}  ",
    42, -7, 0, 2**63 - 1, b"raw", b"", b"x" * (MAX_KEY_BYTES + 1), True, None, 1.5, uuid.UUID(int=1), bytearray(b"b"),
)


def _trusted_native_canonical() -> Callable[[object], bytes | None] | None:
    """``streams-native``'s canonical_key (None where the Python rule must decide) if it agrees on every probe."""
    if NATIVE is None:
        return None
    compiled = NATIVE.canonical_key
    for probe in _CANONICAL_PROBES:
        try:
            expected: bytes | None = canonical_key(probe)
        except InvalidKeyError:
            expected = None
        got = compiled(probe)
        if got is not None and got != expected:
            return None
    return compiled  # type: ignore[no-any-return]


#: The compiled canonical_key for hot paths, or None: it returns the canonical bytes, or
#: None where :func:`canonical_key` must be called (to raise, or for a rarer type).
fast_canonical_key = _trusted_native_canonical()


if fast_canonical_key is not None:
    _canonical_key_python = canonical_key
    _compiled_canonical = fast_canonical_key

    def canonical_key(value: object) -> bytes:  # noqa: F811 - the same rule, compiled for the common keys
        kb = _compiled_canonical(value)
        return kb if kb is not None else _canonical_key_python(value)

    canonical_key.__doc__ = _canonical_key_python.__doc__


# --- Kafka's murmur2 -------------------------------------------------------------


def murmur2_reference(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` in pure Python: a signed 32-bit int.

    A line-by-line port of ``org.apache.kafka.common.utils.Utils.murmur2`` (seed
    0x9747b28c, little-endian 4-byte blocks), returning what the Java method
    returns. Slow; the reference the compiled implementation is checked against.
    Raises TypeError if ``data`` is not bytes-like.
    """
    data = bytes(data)
    length = len(data)
    m = 0x5BD1E995
    h = (_MURMUR2_SEED ^ length) & _MASK32
    end = length - length % 4
    for i in range(0, end, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & _MASK32
        k ^= k >> 24
        k = (k * m) & _MASK32
        h = ((h * m) & _MASK32) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def _trusted_compiled_murmur2():  # type: ignore[no-untyped-def]
    """The compiled ``murmurhash2(data, seed)`` (unsigned result) if it reproduces
    the reference on probes of every tail length, else None."""
    try:
        from murmurhash2 import murmurhash2 as compiled
    except ImportError:  # pragma: no cover - a dependency in practice
        return None
    probes = (b"", b"a", b"21", b"abc", b"foobar", b"a-little-bit-long-string", bytes(range(256)))
    if all(compiled(p, _MURMUR2_SEED) == murmur2_reference(p) & _MASK32 for p in probes):
        return compiled
    return None  # pragma: no cover


_COMPILED_MURMUR2 = _trusted_compiled_murmur2()
# streams-native's placer takes the key and the partition count in one call (the hot path's placer).
_NATIVE_MURMUR2 = NATIVE is not None and all(
    NATIVE.Murmur2Placer(n)(p) == (murmur2_reference(p) & 0x7FFF_FFFF) % n
    for p in (b"", b"a", b"21", b"abc", b"foobar", b"a-little-bit-long-string", bytes(range(256))) for n in (1, 7, 2**31))
#: Which murmur2 is in use: "murmurhash2" (compiled, checked at import) or "pure-python"; placers
#: use "streams-native" when it is installed and agrees.
MURMUR2_IMPLEMENTATION = "pure-python" if _COMPILED_MURMUR2 is None else "murmurhash2"


def _murmur2_unsigned(data: bytes) -> int:
    if _COMPILED_MURMUR2 is None:  # pragma: no cover
        return murmur2_reference(data) & _MASK32
    return _COMPILED_MURMUR2(data, _MURMUR2_SEED)  # type: ignore[no-any-return]


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data``: the signed 32-bit int the Java client returns.

    Equal to ``Utils.murmur2`` in Apache Kafka for every input. Raises InvalidArgumentError if
    ``data`` is not ``bytes``.
    """
    if data.__class__ is not bytes:
        raise InvalidArgumentError(f"murmur2 needs bytes, got {type(data).__name__}")
    h = _murmur2_unsigned(data)
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def kafka_partition(key_bytes: bytes, n: int) -> int:
    """The partition Kafka's clients pick for a keyed record: ``toPositive(murmur2(key)) % n``.

    ``toPositive`` is Kafka's ``x & 0x7fffffff`` (it masks the sign bit, not ``abs``).

    Identical to the Java client's ``BuiltInPartitioner.partitionForKey``, aiokafka's
    ``DefaultPartitioner`` and librdkafka's ``murmur2_random``. Raises InvalidArgumentError if
    ``n`` is not an int >= 1 or ``key_bytes`` is not bytes.
    """
    if n.__class__ is not int or n < 1:
        require_int("partition count", n, 1, error=InvalidArgumentError)
    return (murmur2(key_bytes) & 0x7FFF_FFFF) % n


def murmur2_partitioner(n: int) -> Callable[[bytes], int]:
    """Return ``f(key_bytes) -> kafka_partition(key_bytes, n)`` without per-call checks.

    For hot paths that validated ``n`` once. Raises InvalidArgumentError if ``n`` < 1.
    """
    if n.__class__ is not int or n < 1:
        require_int("partition count", n, 1, error=InvalidArgumentError)
    if _NATIVE_MURMUR2 and n < 2**32:
        return NATIVE.Murmur2Placer(n)  # type: ignore[no-any-return, union-attr]
    compiled = _COMPILED_MURMUR2
    if compiled is None:  # pragma: no cover
        return lambda key: (murmur2_reference(key) & 0x7FFF_FFFF) % n
    return lambda key: (compiled(key, _MURMUR2_SEED) & 0x7FFF_FFFF) % n


# --- other hashes -----------------------------------------------------------------


def xxh3_64(data: bytes) -> int:
    """XXH3 64-bit of ``data`` with seed 0, as an unsigned int (``xxhash.xxh3_64_intdigest``)."""
    return xxhash.xxh3_64_intdigest(data)


def sha256_int(data: bytes) -> int:
    """SHA-256 of ``data``, the whole 256-bit digest read as a big-endian unsigned int."""
    return int.from_bytes(hashlib.sha256(data).digest(), "big")


def sha256_64(data: bytes) -> int:
    """The first 8 bytes of SHA-256 of ``data``, read as a big-endian unsigned 64-bit int."""
    return int.from_bytes(hashlib.sha256(data).digest()[:8], "big")


def portable_shard(value: object, n: int) -> int:
    """``int.from_bytes(sha256(canonical_key(value)), "big") % n``: the portable reference.

    Any language can repeat it with a SHA-256 and big-integer remainder. Raises
    InvalidKeyError for an unacceptable key, InvalidArgumentError if ``n`` is not an int >= 1.
    """
    if n.__class__ is not int or n < 1:
        require_int("shard count", n, 1, error=InvalidArgumentError)
    return sha256_int(canonical_key(value)) % n


def jump_hash(key: int, n: int) -> int:
    """Lamping and Veach's jump consistent hash of ``key`` into ``n`` buckets.

    A port of the paper's C++ (arXiv:1406.2294): ``key`` is taken modulo 2**64;
    returns an int in ``[0, n)``. Growing ``n`` to ``n + 1`` moves a key only to the
    new bucket ``n``, and only about ``1/(n + 1)`` of keys. Raises InvalidArgumentError if
    ``n`` is not an int >= 1 or ``key`` is not an int.
    """
    if n.__class__ is not int or n < 1:
        require_int("bucket count", n, 1, error=InvalidArgumentError)
    if not isinstance(key, int):
        raise InvalidArgumentError(f"jump_hash key must be an int, got {type(key).__name__}")
    key &= _MASK64
    b, j = -1, 0
    while j < n:
        b = j
        key = (key * 2862933555777941757 + 1) & _MASK64
        # C++: j = (b + 1) * (double(1LL << 31) / double((key >> 33) + 1))
        j = int((b + 1) * (2147483648.0 / ((key >> 33) + 1)))
    return b
