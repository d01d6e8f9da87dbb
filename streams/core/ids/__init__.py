"""Event IDs: UUIDv7 (RFC 9562) and Snowflake, generated and parsed back.

Both kinds sort by creation time, carry their time inside, and strictly increase
within one process. Pick one per topic:

* :func:`uuid7` / :class:`UUIDv7Generator`: 128 bits, no coordination needed.
* :class:`Snowflake`: 64 bits (fits an int64 column), needs a unique worker id
  per process; layout and epoch from a :class:`SnowflakeLayout`.

:func:`parse_id` takes either back apart; :func:`id_time_ms` and :func:`id_bytes`
are its cheap shortcuts for the router (bucket time, salt bytes). Generators take
an injectable clock (and Snowflake a sleep) so tests replay clock jumps exactly.
"""

from streams.core.errors import (
    ClockMovedBackwardsError,
    IdSpaceExhaustedError,
    InvalidIdError,
)
from streams.core.ids.clock import Clock, Sleep, system_clock_ms
from streams.core.ids.parse import IdKind, ParsedId, classify_id, id_bytes, id_time_ms, parse_id
from streams.core.ids.snowflake import (
    DEFAULT_SNOWFLAKE_LAYOUT,
    DISCORD_EPOCH_MS,
    DISCORD_LAYOUT,
    SONYFLAKE_EPOCH_MS,
    SONYFLAKE_LAYOUT,
    TWITTER_EPOCH_MS,
    TWITTER_LAYOUT,
    Snowflake,
    SnowflakeLayout,
)
from streams.core.ids.uuidv7 import UUIDv7Generator, uuid7

__all__ = [
    "uuid7",
    "UUIDv7Generator",
    "Snowflake",
    "SnowflakeLayout",
    "TWITTER_LAYOUT",
    "DISCORD_LAYOUT",
    "SONYFLAKE_LAYOUT",
    "DEFAULT_SNOWFLAKE_LAYOUT",
    "TWITTER_EPOCH_MS",
    "DISCORD_EPOCH_MS",
    "SONYFLAKE_EPOCH_MS",
    "parse_id",
    "classify_id",
    "ParsedId",
    "IdKind",
    "id_time_ms",
    "id_bytes",
    "Clock",
    "Sleep",
    "system_clock_ms",
    "InvalidIdError",
    "ClockMovedBackwardsError",
    "IdSpaceExhaustedError",
]
