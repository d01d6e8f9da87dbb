"""UUIDv7 and Snowflake generation and parsing, with injected clocks (no real sleeping)."""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streams.core.errors import ConfigError, IdSpaceExhaustedError
from streams.core.ids import (
    DISCORD_LAYOUT,
    SONYFLAKE_LAYOUT,
    TWITTER_EPOCH_MS,
    TWITTER_LAYOUT,
    ClockMovedBackwardsError,
    IdKind,
    InvalidIdError,
    Snowflake,
    SnowflakeLayout,
    UUIDv7Generator,
    classify_id,
    id_bytes,
    id_time_ms,
    parse_id,
    uuid7,
)

NOW_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


class FakeClock:
    """Integer milliseconds that move only when a test (or a generator's sleep) says so."""

    def __init__(self, ms: int = NOW_MS) -> None:
        self.ms = ms
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.ms

    def sleep(self, seconds: float) -> None:
        waited = round(seconds * 1000)
        assert waited > 0, f"generator asked to sleep {seconds} s"
        self.sleeps.append(seconds)
        self.ms += waited


def fields_v7(value: int, counter_bits: int = 42) -> tuple[int, int]:
    """(unix_ts_ms, counter) of a UUIDv7 made by Method 1 with a counter of that length."""
    tail_bits = 74 - counter_bits
    rand_a = (value >> 64) & 0xFFF
    low = (value >> tail_bits) & ((1 << (counter_bits - 12)) - 1)
    return value >> 80, (rand_a << (counter_bits - 12)) | low


def assert_v7_bits(value: int) -> None:
    assert (value >> 76) & 0xF == 7, f"version nibble of {value:032x}"
    assert (value >> 62) & 0b11 == 0b10, f"variant bits of {value:032x}"


def assert_strictly_increasing(values: list[int]) -> None:
    for earlier, later in zip(values, values[1:]):
        assert earlier < later, f"{earlier:#x} is not below {later:#x}"


# -- UUIDv7 ------------------------------------------------------------------


def test_rfc_9562_example_uuid_decodes_to_its_documented_time() -> None:
    parsed = parse_id("017F22E2-79B0-7CC3-98C4-DC0C0C07398F")

    assert parsed.kind is IdKind.UUID7
    assert parsed.timestamp_ms == 0x017F22E279B0
    # "Tuesday, February 22, 2022 2:22:22.00 PM GMT-05:00"
    assert parsed.timestamp == datetime(2022, 2, 22, 14, 22, 22, tzinfo=timezone(timedelta(hours=-5)))
    assert parsed.timestamp.tzinfo is timezone.utc
    assert parsed.value == uuid.UUID("017f22e2-79b0-7cc3-98c4-dc0c0c07398f")
    assert parsed.worker is None and parsed.sequence is None


def test_uuid7_returns_real_uuids_with_exact_version_variant_and_current_time() -> None:
    before = time.time_ns() // 1_000_000
    values = [uuid7() for _ in range(1000)]
    after = time.time_ns() // 1_000_000

    for value in values:
        assert type(value) is uuid.UUID
        assert value.version == 7 and value.variant == uuid.RFC_4122
        assert_v7_bits(value.int)
    assert before <= values[0].int >> 80 <= values[-1].int >> 80 <= after
    assert_strictly_increasing([v.int for v in values])


def test_fast_built_uuids_behave_like_stdlib_ones() -> None:
    value = UUIDv7Generator().next()
    twin = uuid.UUID(str(value))

    assert value == twin and hash(value) == hash(twin) and str(value) == str(twin)
    assert value.is_safe is uuid.SafeUUID.unknown
    assert pickle.loads(pickle.dumps(value)) == value
    with pytest.raises(TypeError):
        value.int = 0  # type: ignore[misc]


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(-10_000, 10_000), st.sampled_from(["one", "int", "batch"]), st.integers(1, 50)),
        min_size=1,
        max_size=40,
    )
)
def test_uuidv7_ids_strictly_increase_across_forward_and_backward_clock_jumps(
    steps: list[tuple[int, str, int]],
) -> None:
    clock = FakeClock()
    generator = UUIDv7Generator(clock=clock)
    produced: list[int] = []
    latest_clock = 0
    for jump, method, count in steps:
        clock.ms += jump
        latest_clock = max(latest_clock, clock.ms)
        if method == "one":
            new = [generator.next().int]
        elif method == "int":
            new = [generator.next_int()]
        else:
            new = [u.int for u in generator.next_batch(count)]
        for value in new:
            assert_v7_bits(value)
            # A 42-bit counter cannot overflow here: the ID time is the latest clock reading.
            assert value >> 80 == latest_clock
        produced.extend(new)
    assert_strictly_increasing(produced)


@settings(max_examples=40, deadline=None)
@given(batch=st.integers(1, 3000))
def test_uuidv7_batch_counters_are_consecutive(batch: int) -> None:
    generator = UUIDv7Generator(clock=FakeClock())
    values = generator.next_int_batch(batch) + [generator.next_int()]

    keys = [(ts << 42) | counter for ts, counter in map(fields_v7, values)]
    assert keys == list(range(keys[0], keys[0] + len(values)))
    assert keys[0] & (1 << 41) == 0, "a fresh counter starts with its rollover guard bit clear"


@settings(max_examples=30, deadline=None)
@given(counter_bits=st.sampled_from([12, 13, 14, 17]), use_batch=st.booleans())
def test_uuidv7_counter_overflow_advances_the_timestamp_and_never_wraps(counter_bits: int, use_batch: bool) -> None:
    clock = FakeClock()  # frozen: every ID lands in one wall-clock millisecond
    generator = UUIDv7Generator(clock=clock, counter_bits=counter_bits)
    total = 3 * (1 << counter_bits) + 7  # at least three overflows
    values = generator.next_int_batch(total) if use_batch else [generator.next_int() for _ in range(total)]

    assert_strictly_increasing(values)
    decoded = [fields_v7(v, counter_bits) for v in values]
    assert decoded[-1][0] >= clock.ms + 3, "the timestamp ran ahead by one ms per overflow"
    for (ts, counter), (next_ts, next_counter) in zip(decoded, decoded[1:]):
        if next_ts == ts:
            assert next_counter == counter + 1
        else:
            assert (next_ts, next_counter) == (ts + 1, 0), "overflow restarts the counter at 0"
            assert counter == (1 << counter_bits) - 1
    for value in values:
        assert_v7_bits(value)


def test_uuidv7_refuses_to_pass_the_48_bit_timestamp() -> None:
    clock = FakeClock((1 << 48) - 1)
    generator = UUIDv7Generator(clock=clock, counter_bits=12)
    issued = []
    with pytest.raises(IdSpaceExhaustedError):
        for _ in range(5000):
            issued.append(generator.next_int())
    assert 2048 <= len(issued) <= 4096 and all(v >> 80 == (1 << 48) - 1 for v in issued)
    clock.ms += 1
    with pytest.raises(IdSpaceExhaustedError):
        generator.next_int()


@pytest.mark.parametrize(
    ("reading", "error", "fragment"),
    [
        (-1, ConfigError, "before the Unix epoch"),
        (1.5e12, ConfigError, "float"),
        (1 << 48, IdSpaceExhaustedError, "2**48"),
    ],
)
def test_uuidv7_rejects_a_clock_reading_it_cannot_encode(reading: object, error: type, fragment: str) -> None:
    generator = UUIDv7Generator(clock=lambda: reading)
    with pytest.raises(error, match=fragment.replace("*", r"\*")):
        generator.next()


@pytest.mark.parametrize("counter_bits", [11, 43, True, 20.0])
def test_uuidv7_counter_length_outside_the_rfc_range_is_a_config_error(counter_bits: object) -> None:
    with pytest.raises(ConfigError, match=r"counter_bits must be an int in \[12, 42\]"):
        UUIDv7Generator(counter_bits=counter_bits)  # type: ignore[arg-type]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_draws_different_random_bits_from_its_parent() -> None:
    generator = UUIDv7Generator(clock=FakeClock())
    generator.next_int()  # fill the random pool before forking
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(write_end, generator.next_int().to_bytes(16, "big"))
        os._exit(0)
    os.close(write_end)
    child_value = int.from_bytes(os.read(read_end, 16), "big")
    os.close(read_end)
    os.waitpid(pid, 0)
    parent_value = generator.next_int()
    assert child_value & 0xFFFFFFFF != parent_value & 0xFFFFFFFF


# -- threads -----------------------------------------------------------------


def draw_in_threads(draw, threads: int = 8, per_thread: int = 100_000) -> list[list[int]]:
    results: list[list[int]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def work(slot: int) -> None:
        start.wait()
        out = results[slot]
        for _ in range(per_thread):
            out.append(draw())

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # switch threads often, to interleave them hard
    try:
        workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        sys.setswitchinterval(old_interval)
    return results


def test_eight_threads_get_unique_and_per_thread_increasing_uuidv7s() -> None:
    generator = UUIDv7Generator()
    results = draw_in_threads(lambda: generator.next().int)

    everything = [v for per_thread in results for v in per_thread]
    assert len(everything) == 800_000 and len(set(everything)) == 800_000
    for per_thread in results:
        assert_strictly_increasing(per_thread)


def test_eight_threads_get_unique_and_per_thread_increasing_snowflakes() -> None:
    clock = FakeClock()  # moves only when the generator waits for the next millisecond
    generator = Snowflake(7, clock=clock, sleep=clock.sleep)
    results = draw_in_threads(generator.next)

    everything = [v for per_thread in results for v in per_thread]
    assert len(everything) == 800_000 and len(set(everything)) == 800_000
    for per_thread in results:
        assert_strictly_increasing(per_thread)
    assert len(clock.sleeps) == 800_000 // 4096, "one wait per exhausted millisecond"


# -- Snowflake ---------------------------------------------------------------


def test_snowflake_fields_follow_the_default_twitter_layout() -> None:
    clock = FakeClock()
    value = Snowflake(5, clock=clock).next()

    assert value == ((NOW_MS - TWITTER_EPOCH_MS) << 22) | (5 << 12) | 0
    assert 0 < value < 2**63


def test_snowflake_waits_out_a_clock_step_back_within_tolerance() -> None:
    clock = FakeClock()
    generator = Snowflake(1, clock=clock, sleep=clock.sleep, max_backwards_ms=10)
    first = generator.next()
    clock.ms -= 10

    second = generator.next()

    assert clock.sleeps == [0.010]
    assert second == first + 1, "same millisecond, next sequence number"


def test_snowflake_raises_with_the_gap_when_the_clock_steps_back_too_far() -> None:
    clock = FakeClock()
    generator = Snowflake(1, clock=clock, sleep=clock.sleep, max_backwards_ms=10)
    first = generator.next()
    clock.ms -= 11

    with pytest.raises(ClockMovedBackwardsError, match="11 ms") as caught:
        generator.next()

    assert caught.value.gap_ms == 11 and clock.sleeps == []
    clock.ms += 11
    assert generator.next() == first + 1, "after the clock returns, IDs continue where they stopped"


def test_exhausted_sequence_moves_to_the_next_millisecond() -> None:
    clock = FakeClock()
    generator = Snowflake(3, clock=clock, sleep=clock.sleep)
    values = [generator.next() for _ in range(4097)]

    last = parse_id(values[-1])
    assert parse_id(values[-2]).sequence == 4095
    assert (last.timestamp_ms, last.sequence, last.worker) == (NOW_MS + 1, 0, 3)
    assert clock.sleeps == [0.001]
    assert_strictly_increasing(values)


def test_sonyflake_waits_for_the_next_ten_millisecond_unit() -> None:
    clock = FakeClock(NOW_MS + 3)
    generator = Snowflake(9, SONYFLAKE_LAYOUT, clock=clock, sleep=clock.sleep)
    values = generator.next_batch(257)

    assert clock.sleeps == [0.007], "from ...003 ms to the next 10 ms boundary"
    assert parse_id(values[-1], layout=SONYFLAKE_LAYOUT).timestamp_ms == NOW_MS + 10


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 9000), min_size=1, max_size=6),
    ticks=st.lists(st.integers(0, 3), min_size=6, max_size=6),
)
def test_snowflake_batches_equal_the_same_number_of_single_calls(sizes: list[int], ticks: list[int]) -> None:
    batch_clock, single_clock = FakeClock(), FakeClock()
    batched = Snowflake(2, clock=batch_clock, sleep=batch_clock.sleep)
    single = Snowflake(2, clock=single_clock, sleep=single_clock.sleep)
    for size, tick in zip(sizes, ticks):
        batch_clock.ms += tick
        single_clock.ms += tick
        assert batched.next_batch(size) == [single.next() for _ in range(size)]
    assert batch_clock.sleeps == single_clock.sleeps


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(-30, 30), st.integers(1, 5000)), min_size=1, max_size=25),
    layout=st.sampled_from([TWITTER_LAYOUT, DISCORD_LAYOUT, SONYFLAKE_LAYOUT]),
)
def test_snowflake_ids_strictly_increase_and_never_repeat_across_clock_jumps(
    steps: list[tuple[int, int]], layout: SnowflakeLayout
) -> None:
    clock = FakeClock()
    generator = Snowflake(1, layout, clock=clock, sleep=clock.sleep, max_backwards_ms=10)
    produced: list[int] = []
    for jump, count in steps:
        clock.ms += jump
        try:
            produced.extend(generator.next_batch(count))
        except ClockMovedBackwardsError as error:
            assert error.gap_ms > 10
            clock.ms += error.gap_ms  # the clock comes back; the generator must carry on
            produced.extend(generator.next_batch(count))
    assert_strictly_increasing(produced)
    assert all(parse_id(v, layout=layout).worker == 1 for v in produced[:: max(1, len(produced) // 50)])


@pytest.mark.parametrize("worker_id", [True, False, -1, 1024, 1.0, "1", None])
def test_invalid_worker_ids_are_rejected_with_the_allowed_range(worker_id: object) -> None:
    with pytest.raises(ConfigError, match=r"worker_id must be an int in \[0, 1023\], got"):
        Snowflake(worker_id)  # type: ignore[arg-type]


def test_worker_range_follows_the_layout() -> None:
    assert Snowflake(65535, SONYFLAKE_LAYOUT).worker_id == 65535
    with pytest.raises(ConfigError, match=r"\[0, 65535\], got 65536"):
        Snowflake(65536, SONYFLAKE_LAYOUT)


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"timestamp_bits": 0}, "timestamp_bits"),
        ({"timestamp_bits": 64}, "timestamp_bits"),
        ({"worker_bits": -1}, "worker_bits"),
        ({"sequence_bits": True}, "sequence_bits"),
        ({"timestamp_bits": 42}, r"timestamp_bits \+ worker_bits \+ sequence_bits must be <= 63"),
        ({"epoch_ms": -1}, "epoch_ms"),
        ({"epoch_ms": 1.5}, "epoch_ms"),
        ({"time_unit_ms": 0}, "time_unit_ms"),
    ],
)
def test_layout_validation_names_the_offending_field(arguments: dict[str, object], field: str) -> None:
    values: dict[str, object] = {"timestamp_bits": 41, "worker_bits": 10, "sequence_bits": 12, "epoch_ms": 0}
    values.update(arguments)
    with pytest.raises(ConfigError, match=field):
        SnowflakeLayout(**values)  # type: ignore[arg-type]


def test_timestamp_field_overflow_raises_instead_of_wrapping() -> None:
    layout = SnowflakeLayout(4, 2, 2, epoch_ms=NOW_MS)  # 16 ms of time, 4 IDs per ms
    clock = FakeClock(NOW_MS + 15)
    generator = Snowflake(0, layout, clock=clock, sleep=clock.sleep)
    last_four = generator.next_batch(4)

    with pytest.raises(IdSpaceExhaustedError, match="timestamp field is full"):
        generator.next()  # sequence full, and the next millisecond does not fit
    assert parse_id(last_four[-1], layout=layout).timestamp_ms == layout.last_ms == NOW_MS + 15


def test_clock_before_the_epoch_is_a_clear_error() -> None:
    generator = Snowflake(0, clock=lambda: TWITTER_EPOCH_MS - 1)
    with pytest.raises(ConfigError, match="before the layout's epoch_ms 1288834974657"):
        generator.next()


@settings(max_examples=100, deadline=None)
@given(
    layout=st.sampled_from([TWITTER_LAYOUT, DISCORD_LAYOUT, SONYFLAKE_LAYOUT]),
    offset=st.floats(0, 1),
    worker_share=st.floats(0, 1),
    count=st.integers(1, 300),
)
def test_preset_layouts_round_trip_through_parse_id(
    layout: SnowflakeLayout, offset: float, worker_share: float, count: int
) -> None:
    # Leave room for the batch: a batch that would run past the layout's last unit raises
    # IdSpaceExhaustedError (tested on its own), which is not what this test is about.
    last = min(layout.last_ms, 253402300799999) - (count + 1) * layout.time_unit_ms
    now = layout.epoch_ms + int(offset * (last - layout.epoch_ms))
    worker = int(worker_share * layout.max_worker)
    clock = FakeClock(now)
    values = Snowflake(worker, layout, clock=clock, sleep=clock.sleep).next_batch(count)

    unit_start = now - (now - layout.epoch_ms) % layout.time_unit_ms
    parsed = parse_id(values[0], layout=layout)
    assert (parsed.kind, parsed.timestamp_ms, parsed.worker, parsed.sequence) == (
        IdKind.SNOWFLAKE,
        unit_start,
        worker,
        0,
    )
    for value in values:
        again = parse_id(value, layout=layout)
        assert again.worker == worker
        for spelling in (value, str(value), id_bytes(value, layout=layout)):
            assert parse_id(spelling, layout=layout) == again
        assert id_time_ms(value, layout=layout) == again.timestamp_ms


def test_discord_documented_example_id_decodes() -> None:
    parsed = parse_id(175928847299117063, layout=DISCORD_LAYOUT)

    assert parsed.timestamp_ms == 1462015105796
    assert parsed.worker == (1 << 5) | 0  # internal worker 1, process 0
    assert parsed.sequence == 7


def test_sonyflake_layout_puts_the_sequence_above_the_machine_id() -> None:
    clock = FakeClock(SONYFLAKE_LAYOUT.epoch_ms + 1234)
    first, second = Snowflake(0xABCD, SONYFLAKE_LAYOUT, clock=clock).next_batch(2)

    assert first == (123 << 24) | (0 << 16) | 0xABCD
    assert second - first == 1 << 16


# -- parsing -----------------------------------------------------------------

uuid7_ints = st.builds(
    lambda ts, rand_a, rand_b: (ts << 80) | (7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b,
    st.integers(0, 253402300799999),
    st.integers(0, 0xFFF),
    st.integers(0, (1 << 62) - 1),
)


def spellings(value: uuid.UUID) -> list[object]:
    text = str(value)
    return [
        value,
        text,
        text.upper(),
        value.hex,
        value.hex.upper(),
        "{" + text + "}",
        "{" + value.hex.upper() + "}",
        "urn:uuid:" + text,
        "URN:UUID:" + text.upper(),
        value.bytes,
        bytearray(value.bytes),
        memoryview(value.bytes),
    ]


@settings(max_examples=200)
@given(number=uuid7_ints)
def test_every_uuid_spelling_parses_to_the_same_id(number: int) -> None:
    value = uuid.UUID(int=number)
    expected = parse_id(value)

    assert expected.value == value and expected.timestamp_ms == number >> 80
    for spelling in spellings(value):
        assert parse_id(spelling) == expected, spelling
        assert id_bytes(spelling) == value.bytes
        assert id_time_ms(spelling) == number >> 80


def test_generated_uuid7_round_trips_through_its_text() -> None:
    value = uuid7()
    assert parse_id(str(value).upper()).value == value


INVALID = [
    (True, "bool"),
    (1.5, "float"),
    (None, "NoneType"),
    (-1, "negative int"),
    (2**63, "does not fit the 63-bit"),
    (b"\x01" * 15, "bytes of length 15"),
    ("zz" * 16, "bad hex"),
    ("017F22E2-79B07CC3-98C4-DC0C0C07398F-", "misplaced hyphens"),
    ("017F22E2-79B0-7CC3-98C4", "neither UUID text"),
    ("", "neither UUID text"),
    ("1" * 25, "too long for a Snowflake"),
    (uuid.UUID("a0be7cd3-481e-457b-ad6f-efe2db0f444d"), "UUID version 4, expected 7"),
    ("a0be7cd3-481e-457b-ad6f-efe2db0f444d", "UUID version 4, expected 7"),
    (uuid.UUID("017f22e2-79b0-7cc3-d8c4-dc0c0c07398f"), "variant bits 11, expected 10"),
    (uuid.UUID(int=0), "nil UUID"),
    (bytes(16), "nil UUID"),
]


@pytest.mark.parametrize(("value", "fragment"), INVALID)
def test_parse_id_rejects_what_is_not_an_id_and_says_why(value: object, fragment: str) -> None:
    for function in (parse_id, id_time_ms, id_bytes):
        with pytest.raises(InvalidIdError, match=fragment):
            function(value)


def test_a_snowflake_int_too_big_for_a_smaller_layout_is_rejected() -> None:
    with pytest.raises(InvalidIdError, match="63-bit"):
        parse_id(2**63 - 1 + 1)
    assert parse_id(2**63 - 1).kind is IdKind.SNOWFLAKE
    with pytest.raises(InvalidIdError, match="63-bit"):
        parse_id(2**63, layout=SONYFLAKE_LAYOUT)


def test_snowflake_id_bytes_are_eight_big_endian_bytes() -> None:
    value = Snowflake(1, clock=FakeClock()).next()

    assert id_bytes(value) == value.to_bytes(8, "big") == id_bytes(str(value))
    assert parse_id(id_bytes(value)).value == value


def test_uuid_times_past_year_9999_are_read_by_id_time_ms_but_not_parse_id() -> None:
    number = ((1 << 48) - 1) << 80 | (7 << 76) | (0b10 << 62)
    assert id_time_ms(uuid.UUID(int=number)) == (1 << 48) - 1
    with pytest.raises(InvalidIdError, match="after year 9999"):
        parse_id(uuid.UUID(int=number))


def test_id_kinds_compare_equal_to_their_plain_strings() -> None:
    assert parse_id(uuid7()).kind == "uuid7"
    assert parse_id(1).kind == "snowflake"
    assert IdKind("snowflake") is IdKind.SNOWFLAKE


# classify_id is parse_id's per-record form: it must accept and reject exactly the same inputs.
@settings(max_examples=400)
@given(st.one_of(
    st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()), st.uuids(),
    st.builds(lambda n: str(uuid.UUID(int=(n & ~(0xF << 76) & ~(0b11 << 62)) | (7 << 76) | (0b10 << 62))),
              st.integers(0, (1 << 128) - 1)),
    st.integers(-5, (1 << 64) + 5), st.text(max_size=40), st.binary(max_size=17),
    st.text("0123456789abcdef-", min_size=36, max_size=36)))
@example("e677d21f-dc00-7000-8000-000000000000")  # a UUIDv7 whose 48-bit time is after year 9999
def test_classify_id_agrees_with_parse_id_on_every_input(value: object) -> None:
    try:
        parsed = parse_id(value)
    except InvalidIdError:
        with pytest.raises(InvalidIdError):
            classify_id(value)
        return
    kind, number = classify_id(value)
    assert kind is parsed.kind
    assert number == (parsed.value.int if isinstance(parsed.value, uuid.UUID) else parsed.value)


@settings(max_examples=2000)
@given(number=st.integers(0, (1 << 128) - 1), upper=st.booleans(), force_v7=st.booleans())
def test_canonical_uuid_text_is_classified_as_the_uuid_int_whatever_the_path(
        number: int, upper: bool, force_v7: bool) -> None:
    """The canonical-text fast path of classify_id agrees with the general one (and with uuid.UUID)."""
    from streams.core.ids import IdKind, classify_id
    from streams.core.errors import InvalidIdError
    if force_v7:
        number = (number & ~(0xF << 76) & ~(0b11 << 62)) | (7 << 76) | (0b10 << 62)
    text = str(uuid.UUID(int=number))
    is_v7 = (number >> 76) & 0xF == 7 and (number >> 62) & 0b11 == 0b10 and (number >> 80) < 253_402_300_800_000
    for spelling in (text, text.upper() if upper else "{" + text + "}"):
        if is_v7:
            assert classify_id(spelling) == (IdKind.UUID7, number)
        else:
            with pytest.raises(InvalidIdError):
                classify_id(spelling)
