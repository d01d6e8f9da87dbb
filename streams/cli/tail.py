"""``streams tail TOPIC``: print the decoded records of one of the project's topics.

A record says what it carries: the ``streams-schema`` header (``aggregate/1``,
``dead_letter/2``, ``hot_key_notice/2``, ``routing_map/1``...; see
:data:`streams.core.serde.SCHEMA_HEADER`) or, for events, ``content-type``. A record
without either (written before the header existed, or by another producer) is
decoded by the topic's role in the settings' :class:`~streams.core.config.TopicNames`
(``streams.aggregates`` holds aggregates ...); a JSON object on a topic of no known
role is shown as JSON, anything else as raw bytes (UTF-8 text quoted, else hex).
Nothing a record holds reaches the terminal unescaped: control characters in text
are escaped, bytes fields are a size and a hex preview (text) or base64 (``--json``).

The decoding (:func:`decode_record`) is pure; :func:`run` reads the topic from a
time or offset up to the end offsets taken at the start, or on with ``--follow``.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple

import orjson
from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition

from streams.cli import HelpFormatter, add_kafka_arguments, duration_ms, kafka_client_config, positive_int
from streams.cli.replay import instant_ms
from streams.core.config import TopicNames, WorkerSettings, load
from streams.core.errors import StreamsError
from streams.core.routing.directory import decode_notice
from streams.core.routing.hashing import kafka_partition
from streams.core.routing.maps import decode_map, map_headers
from streams.core.serde import CONTENT_TYPE, SCHEMA_HEADER, SCHEMA_VERSIONS, AvroCodec, JsonCodec
from streams.core.time.buckets import TimeBuckets
from streams.core.topicplan import bucket_of_topic
from streams.core.validate import BUCKET_PLACEHOLDER
from streams.kafka.admin import TopicNotFoundError
from streams.kafka.clients import new_consumer

NAME = "tail"

_EPILOG = """\
examples:
  streams tail streams.aggregates --from-beginning
  streams tail streams.dead-letters --since 10m --json | jq .value.reason
  streams tail streams.late-events --since 2026-12-02T11:00:00Z --max 20
  streams tail streams.hot-keys --from-beginning --follow
  streams tail streams.events --offset -5          (the last 5 records of each partition)

Each record is decoded by its streams-schema header (schema/version), events by
their content-type; without either, by the topic's role in the settings
(STREAMS_AGGREGATES_TOPIC, STREAMS_DEAD_LETTERS_TOPIC ...); anything else is shown as raw
bytes. Text lines read: time topic[partition]@offset key schema: field=value ...
bytes fields show as <N bytes: hex...>; --json prints one JSON object per record,
bytes as {"size": N, "base64": ...}. Without --follow the command stops at the
end offsets it saw when it started.
"""

#: The schema a topic role holds when its records name none (records before the header existed).
ROLE_SCHEMAS: dict[str, str] = {"aggregates": "aggregate", "partials": "aggregate", "late_events": "late_event",
                                "dead_letters": "dead_letter", "bucket_closed": "bucket_closed",
                                "hot_keys": "hot_key_notice", "routing_maps": "routing_map", "events": "event"}
#: Roles whose records are JSON without a schema (sketch summaries, ID leases).
JSON_ROLES = frozenset({"sketches", "id_leases"})
_HEX_PREVIEW = 24


class Decoded(NamedTuple):
    """One record decoded: ``schema`` it was read as (``"aggregate/1"``, ``"json"``, ``"raw"``,
    ``"tombstone"``), ``value`` (a dict; None for raw and tombstones), ``error`` why it
    could not be decoded as what it claimed (None when it was)."""

    schema: str
    value: dict[str, Any] | None
    error: str | None = None


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``tail`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="print the decoded records of a topic (aggregates, late events, dead letters, hot keys ...)",
        description="Print the records of one of the project's topics, decoded by the schema each names, as text "
                    "or JSON lines, from a time or an offset, to the current end or on (--follow).",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    parser.add_argument("topic", metavar="TOPIC", help="the topic to read, e.g. streams.aggregates")
    start = parser.add_argument_group("where to start (default: the beginning)").add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="from the oldest record kept")
    start.add_argument("--since", type=_since_ms, metavar="DURATION|TIME",
                       help="records from this long ago (10m, 2h) or from a time (ISO 8601, no zone = UTC; epoch ms)")
    start.add_argument("--offset", type=int, metavar="N",
                       help="from offset N of each partition; a negative N: the last -N records of each")
    parser.add_argument("--partition", type=int, action="append", metavar="P",
                        help="read only partition P (repeat for more; default: all)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="keep printing new records until Ctrl-C (default: stop at the end offsets at start)")
    parser.add_argument("--max", type=positive_int, metavar="N", help="stop after N records")
    parser.add_argument("--json", action="store_true", help="one JSON object per record")
    add_kafka_arguments(parser)
    return parser


def _since_ms(text: str) -> int:
    """argparse type: a duration back from now (``10m``) or an instant (:func:`instant_ms`), as epoch ms."""
    try:
        return int(time.time() * 1000) - duration_ms(text)
    except argparse.ArgumentTypeError:
        return instant_ms(text)


def run(args: argparse.Namespace) -> int:
    """Print the records; raises TopicNotFoundError for a missing topic, StreamsError for an unreachable cluster."""
    role = topic_role(args.topic, load(TopicNames), _buckets())
    printed = 0
    for msg in _records(args):
        decoded = decode_record(role, msg.value(), msg.headers())
        line = (json_line(msg, decoded) if args.json else text_line(msg, decoded))
        sys.stdout.write(line + "\n")
        printed += 1
        if args.max is not None and printed >= args.max:
            break
    sys.stdout.flush()
    return 0


def _buckets() -> TimeBuckets | None:
    try:
        worker = load(WorkerSettings)
        return TimeBuckets(worker.bucket_width, grace=worker.grace)
    except StreamsError:
        return None


# --- decoding (pure) -----------------------------------------------------------------------------


def topic_role(topic: str, names: TopicNames, buckets: TimeBuckets | None = None) -> str | None:
    """The role (``"aggregates"``, ``"events"`` ...) ``topic`` plays under ``names``; None if none.

    A bucket topic of a per-bucket events template plays ``"events"`` (``buckets`` to
    recognise its label).
    """
    for role, name in vars(names).items():
        if name == topic:
            return role
    if buckets is not None and BUCKET_PLACEHOLDER in names.events and bucket_of_topic(topic, names.events, buckets):
        return "events"
    return None


def decode_record(role: str | None, value: bytes | None,
                  headers: Iterable[tuple[str, bytes | None]] | None) -> Decoded:
    """Decode one record's ``value`` by its headers, else by the topic's ``role``; never raises.

    ``streams-schema: name/version`` names the schema (hot-key notices and routing maps
    through their own decoders, which check the version; other schemas through
    :class:`AvroCodec`, which reads their earlier versions too); ``content-type`` names
    an event's format; a role from :data:`ROLE_SCHEMAS` or :data:`JSON_ROLES` stands in
    for a record naming neither. A record that cannot be decoded is ``raw`` with the reason.
    """
    if value is None:
        return Decoded("tombstone", None)
    found = {name: v for name, v in headers or () if v is not None}
    named = found.get(SCHEMA_HEADER)
    if named is not None:
        text = bytes(named).decode("utf-8", "replace")
        schema = text.split("/", 1)[0]
        return _decode_as(schema, text, value, headers)
    content_type = found.get("content-type")
    if content_type is not None:
        for fmt, marker in CONTENT_TYPE.items():
            if bytes(content_type) == marker:
                return _decode_as("event", f"event ({fmt})", value, headers, fmt=fmt)
        return Decoded("raw", None, f"unknown content-type {bytes(content_type)[:60]!r}")
    if role in JSON_ROLES:
        try:
            record = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            return Decoded("raw", None, f"not JSON ({exc})")
        return Decoded("json", record if isinstance(record, dict) else {"value": record})
    if role in ROLE_SCHEMAS:
        schema = ROLE_SCHEMAS[role]
        if schema == "event":  # no content-type: the producers' default format, JSON, else Avro
            json_try = _decode_as("event", "event (json)", value, headers, fmt="json")
            return json_try if json_try.error is None else _decode_as("event", "event (avro)", value, headers)
        return _decode_as(schema, f"{schema} (by topic)", value, headers)
    try:  # a topic of no known role (a changelog, another application's): JSON objects read as such
        record = orjson.loads(value)
    except orjson.JSONDecodeError:
        return Decoded("raw", None, None)
    return Decoded("json", record) if isinstance(record, dict) else Decoded("raw", None, None)


def _decode_as(schema: str, label: str, value: bytes, headers: Iterable[tuple[str, bytes | None]] | None,
               fmt: str = "avro") -> Decoded:
    try:
        if schema == "hot_key_notice":
            # version 1 notices carry no header: decode_notice reads None as version 1
            version = None if label.endswith("(by topic)") else label.encode()
            return Decoded(label, decode_notice(value, version, home=kafka_partition).to_record())
        if schema == "routing_map":
            named = map_headers() if label.endswith("(by topic)") else list(headers or ())
            return Decoded(label, decode_map(value, named).to_record())
        if schema not in SCHEMA_VERSIONS:
            return Decoded("raw", None, f"unknown schema {label[:60]!r}")
        codec = JsonCodec(schema) if fmt == "json" else AvroCodec(schema)
        return Decoded(label, codec.decode(value))
    except (StreamsError, ValueError, TypeError) as exc:
        return Decoded("raw", None, f"not {label}: {exc}"[:300])


# --- rendering (pure) ----------------------------------------------------------------------------


def bytes_json(data: bytes) -> dict[str, Any]:
    """``data`` in a JSON record: its size and base64."""
    return {"size": len(data), "base64": base64.b64encode(data).decode()}


def bytes_text(data: bytes) -> str:
    """``data`` in a text line: ``<N bytes: hex of the first 24...>``."""
    more = "..." if len(data) > _HEX_PREVIEW else ""
    return f"<{len(data)} bytes: {data[:_HEX_PREVIEW].hex()}{more}>"


def raw_text(data: bytes) -> str:
    """An undecoded value for a text line: UTF-8 text quoted and escaped (at most 200 characters), else
    :func:`bytes_text`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return bytes_text(data)
    more = "..." if len(text) > 200 else ""
    return f'"{safe_text(text[:200])}"{more} ({len(data)} bytes)'


def safe_text(text: str) -> str:
    """``text`` with control characters (terminal escapes, newlines) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def key_text(key: bytes | None) -> str:
    """A record key for a text line: UTF-8 text (escaped), else its bytes; ``-`` for none."""
    if key is None:
        return "-"
    try:
        return safe_text(key.decode("utf-8"))
    except UnicodeDecodeError:
        return bytes_text(key)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes_json(bytes(value))
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _texty(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes_text(bytes(value))
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{safe_text(str(k))}={_texty(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_texty(v) for v in value) + "]"
    return safe_text(str(value))


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _timestamp(msg: Any) -> int | None:
    kind, ts = msg.timestamp()
    return None if kind == 0 or ts < 0 else int(ts)


def json_line(msg: Any, decoded: Decoded) -> str:
    """One JSON object for a consumed record: where it is, its key, schema, value or raw bytes."""
    key, value = msg.key(), msg.value()
    record: dict[str, Any] = {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "timestamp_ms": _timestamp(msg), "time": _iso(_timestamp(msg)),
        "key": None if key is None else _key_json(key), "schema": decoded.schema, "value": _jsonable(decoded.value),
    }
    if decoded.value is None and value is not None:
        record["raw"] = bytes_json(value)
    if decoded.error:
        record["error"] = decoded.error
    return orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS).decode()


def _key_json(key: bytes) -> Any:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return bytes_json(key)


def text_line(msg: Any, decoded: Decoded) -> str:
    """One line for a consumed record: ``time topic[partition]@offset key schema: field=value ...``."""
    head = f"{_iso(_timestamp(msg)) or '-'} {safe_text(msg.topic())}[{msg.partition()}]@{msg.offset()} " \
           f"key={key_text(msg.key())} {decoded.schema}:"
    if decoded.value is not None:
        body = " ".join(f"{k}={_texty(v)}" for k, v in decoded.value.items())
    elif msg.value() is not None:
        body = raw_text(msg.value())
    else:
        body = "(null value)"
    tail = f" ({safe_text(decoded.error)})" if decoded.error else ""
    return f"{head} {body}{tail}"


# --- reading -------------------------------------------------------------------------------------


def _records(args: argparse.Namespace) -> Iterator[Any]:
    """The topic's records from the start the flags name, to the end offsets at start (or on, following)."""
    timeout = args.timeout
    consumer = new_consumer({**kafka_client_config(args), "group.id": f"streams-tail-{uuid.uuid4().hex[:12]}",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "allow.auto.create.topics": False})
    try:
        try:
            info = consumer.list_topics(args.topic, timeout=timeout).topics.get(args.topic)
        except KafkaException as exc:
            raise StreamsError(f"cannot reach the Kafka cluster: {exc}") from None
        if info is None or info.error is not None or not info.partitions:
            raise TopicNotFoundError(f"topic {args.topic!r} does not exist")
        parts = sorted(info.partitions)
        if args.partition:
            missing = sorted(set(args.partition) - set(parts))
            if missing:
                raise TopicNotFoundError(f"topic {args.topic!r} has no partition {missing[0]} "
                                         f"(it has {len(parts)})")
            parts = sorted(set(args.partition))
        marks = {p: consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=timeout) for p in parts}
        starts = _starts(consumer, args, marks, timeout)
        todo = {p: high for p, (_, high) in marks.items() if starts[p] < high}
        if not args.follow and not todo:
            return
        consumer.assign([TopicPartition(args.topic, p, starts[p]) for p in parts])
        while args.follow or todo:
            for msg in consumer.consume(500, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise StreamsError(f"reading {args.topic!r} failed: {err.str()}")
                    continue
                p = msg.partition()
                if not args.follow:
                    if p not in todo or msg.offset() >= todo[p]:
                        continue  # written after the start: not this run's
                    if msg.offset() + 1 >= todo[p]:
                        del todo[p]
                yield msg
    finally:
        consumer.close()


def _starts(consumer: Any, args: argparse.Namespace, marks: Mapping[int, tuple[int, int]],
            timeout: float) -> dict[int, int]:
    """The first offset to read per partition, as ``--since``, ``--offset`` or the beginning say."""
    if args.since is not None:
        found = consumer.offsets_for_times([TopicPartition(args.topic, p, args.since) for p in marks],
                                           timeout=timeout)
        return {tp.partition: marks[tp.partition][1] if tp.offset in (OFFSET_END, -1) or tp.offset < 0
                else tp.offset for tp in found}
    if args.offset is not None:
        return {p: max(low, min(high, args.offset if args.offset >= 0 else high + args.offset))
                for p, (low, high) in marks.items()}
    return {p: low for p, (low, _) in marks.items()}
