"""Avro (fastavro) and JSON (orjson) codecs for the project's records.

One schema per record type lives in ``schemas/*.avsc`` (shipped as package data); it is parsed once and used
for both formats: Avro writes it schemaless (the reader knows the schema, as with a
schema registry's fixed subject), and JSON records are validated against the same
schema on decode, so a JSON producer cannot smuggle in what Avro would refuse.

Every failure is a :class:`~streams.core.errors.SerializationError` naming the schema and
what is wrong in ``field`` (and in its message): the record's field that is missing,
of the wrong type, null where the schema allows none, or truncated or corrupt in
Avro; ``"payload"`` when the bytes as a whole are not one record; ``"content-type"``
when they are a record of the other format.
"""

from __future__ import annotations

import importlib.resources
import io
import json
import os
from collections.abc import Mapping
from functools import lru_cache
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal, Protocol

import fastavro
import fastavro.validation
import orjson

from streams.core.errors import SerializationError
from streams.core.recordcheck import compile_check

__all__ = ["Codec", "AvroCodec", "JsonCodec", "codec_for", "load_schema", "schema_files", "CONTENT_TYPE", "Format",
           "PAYLOAD", "CONTENT_TYPE_FIELD", "SCHEMA_HEADER", "SCHEMA_VERSIONS", "schema_header"]

Format = Literal["avro", "json"]

#: Value of the ``content-type`` header a producer sets, per format.
CONTENT_TYPE: dict[str, bytes] = {"avro": b"application/vnd.streams+avro", "json": b"application/json"}

#: The header that names the schema and version a record of the project's topics carries
#: (``streams-schema: aggregate/1``), so a reader (``streams tail``, kcat, a Java consumer)
#: knows how to decode its schemaless Avro without a schema registry.
SCHEMA_HEADER = "streams-schema"
#: The current version of each schema in ``schemas/`` (earlier versions still decode, see EARLIER_VERSIONS).
SCHEMA_VERSIONS: dict[str, int] = {"event": 1, "aggregate": 1, "bucket_closed": 1, "dead_letter": 2,
                                   "late_event": 2, "hot_key_notice": 2, "routing_map": 1}


def schema_header(name: str) -> tuple[str, bytes]:
    """The ``streams-schema`` header of a record written with schema ``name`` at its current version."""
    return SCHEMA_HEADER, f"{name}/{SCHEMA_VERSIONS[name]}".encode()


def schema_files() -> Traversable:
    """Where the ``*.avsc`` files are: ``$STREAMS_SCHEMA_DIR`` if set, else the ``streams.schemas`` package data.

    The package data is the repository's top-level ``schemas/`` folder, shipped in
    the wheel (see ``pyproject.toml``), so an installed package finds its schemas
    wherever it is installed. Raises SerializationError if neither is available.
    """
    env = os.environ.get("STREAMS_SCHEMA_DIR")
    if env:
        return Path(env)
    try:
        return importlib.resources.files("streams.schemas")
    except ModuleNotFoundError:
        raise SerializationError("the streams.schemas package data is missing: install the package "
                                 "(pip install .) or set STREAMS_SCHEMA_DIR to the schemas folder") from None


@lru_cache(maxsize=None)
def load_schema(name: str) -> Any:
    """Parse ``<name>.avsc`` from :func:`schema_files` once; raises SerializationError if it is missing or invalid."""
    where = schema_files()
    path = where / f"{name}.avsc"
    try:
        return fastavro.parse_schema(json.loads(path.read_text()))
    except FileNotFoundError:
        raise SerializationError(f"schema {name!r} not found at {path}") from None
    except (ValueError, fastavro.schema.SchemaParseException) as exc:
        raise SerializationError(f"schema {name!r} at {path} is invalid: {exc}") from exc


class Codec(Protocol):
    """Encodes a record (a mapping matching one schema) to bytes and back."""

    format: Format
    schema_name: str

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Bytes for ``record``; raises SerializationError if it does not match the schema."""
        ...

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record in ``data``; raises SerializationError for corrupt or non-conforming input."""
        ...


#: Earlier versions of a schema, oldest last: records they wrote still decode, the
#: fields added since taking their defaults (Avro schema resolution).
EARLIER_VERSIONS: dict[str, tuple[str, ...]] = {"dead_letter": ("dead_letter_v1",), "late_event": ("late_event_v1",)}


class AvroCodec:
    """Schemaless Avro through fastavro, for one schema (records of its earlier versions decode too)."""

    format: Format = "avro"

    def __init__(self, schema_name: str) -> None:
        self.schema_name = schema_name
        self._schema = load_schema(schema_name)
        self._earlier = [load_schema(name) for name in EARLIER_VERSIONS.get(schema_name, ())]

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Avro binary of ``record``; raises SerializationError naming the schema and the field on a mismatch."""
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, self._schema, record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise _mismatch(self.schema_name, record, exc) from exc
        return buf.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record in ``data``; raises SerializationError whose ``field`` says what is wrong.

        An empty payload, trailing bytes or a non-bytes value are ``"payload"``; a
        JSON object read as Avro is ``"content-type"``; a truncated or corrupt value
        names the field being read when it failed (see :func:`_failing_field`).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise _error(self.schema_name, PAYLOAD, f"the payload is a {type(data).__name__}, not bytes")
        if not data:
            raise _error(self.schema_name, PAYLOAD, "the payload is empty")
        buf = io.BytesIO(data)
        try:
            record = fastavro.schemaless_reader(buf, self._schema, None)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types on corrupt input
            earlier = self._read_earlier(data)
            if earlier is not None:
                return earlier
            if _is_json_object(data):
                raise _error(self.schema_name, CONTENT_TYPE_FIELD,
                             "the payload is JSON, but its content-type says Avro") from exc
            field = _failing_field(self.schema_name, data)
            what = "corrupt Avro payload" if field == PAYLOAD else "is truncated or corrupt"
            raise _error(self.schema_name, field, f"{what} ({type(exc).__name__}: {exc})"[:300]) from exc
        if buf.tell() != len(data):
            earlier = self._read_earlier(data)
            if earlier is not None:
                return earlier
            if _is_json_object(data):
                raise _error(self.schema_name, CONTENT_TYPE_FIELD, "the payload is JSON, but its content-type says Avro")
            raise _error(self.schema_name, PAYLOAD, f"{len(data) - buf.tell()} trailing bytes after the record in the payload")
        if not isinstance(record, dict):
            raise _error(self.schema_name, PAYLOAD, "the payload is not a record")
        return record


    def _read_earlier(self, data: bytes) -> dict[str, Any] | None:
        """``data`` read as a record of an earlier version of the schema (whole), or None."""
        for writer in self._earlier:
            buf = io.BytesIO(data)
            try:
                record = fastavro.schemaless_reader(buf, writer, self._schema)
            except Exception:  # noqa: BLE001 - not this version either
                continue
            if buf.tell() == len(data) and isinstance(record, dict):
                return record
        return None


class JsonCodec:
    """JSON through orjson; decoded records are validated against the same Avro schema.

    Fields the schema does not know are kept, not refused (a newer producer may add
    some; the Avro reader skips them the same way).
    """

    format: Format = "json"

    def __init__(self, schema_name: str) -> None:
        self.schema_name = schema_name
        self._schema = load_schema(schema_name)
        self._accept = compile_check(self._schema) or (lambda record: False)
        self._names = frozenset(f["name"] for f in self._schema["fields"])

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """UTF-8 JSON of ``record`` (bytes values are not JSON: use Avro for records holding bytes)."""
        try:
            return orjson.dumps(record)
        except TypeError as exc:
            raise _mismatch(self.schema_name, record, exc) from exc

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record in ``data``, with defaults filled in; raises SerializationError whose ``field`` says what is wrong.

        Bytes that are not JSON (syntax, not UTF-8, NaN, a byte order mark, trailing
        text) or JSON that is not an object are ``"payload"``; this schema's Avro read
        as JSON is ``"content-type"``; a missing field, a wrong type or a null where the
        schema allows none names the field.
        """
        try:
            record = orjson.loads(data)
        except (orjson.JSONDecodeError, TypeError) as exc:
            if isinstance(data, (bytes, bytearray, memoryview)) and data and self._is_avro(data):
                raise _error(self.schema_name, CONTENT_TYPE_FIELD,
                             "the payload is Avro, but its content-type says JSON") from exc
            raise _error(self.schema_name, PAYLOAD, f"invalid JSON payload ({exc})"[:300]) from exc
        if not isinstance(record, dict):
            raise _error(self.schema_name, PAYLOAD, f"the JSON payload is a {type(record).__name__}, not an object")
        # The quick check (streams.core.recordcheck) accepts most records as they come: one that
        # holds every field and passes needs no defaults. Any other takes the full path.
        try:
            if self._accept(record):
                return record
        except KeyError:  # a field is missing
            pass
        self._fill_defaults(record)
        # fastavro's boolean check is ~4x cheaper than its detailed one, which only a failing record pays for.
        if not self._accept(record) and not fastavro.validation.validate(record, self._schema, raise_errors=False,
                                                                          strict=True):
            try:
                fastavro.validation.validate(record, self._schema, raise_errors=True, strict=True)
            except fastavro.validation.ValidationError as exc:
                raise _validation_error(self.schema_name, self._schema, exc) from exc
        return record

    def _fill_defaults(self, record: dict[str, Any]) -> None:
        """Give ``record`` the default of each field it lacks; raises SerializationError for one without a default."""
        if not record.keys() >= self._names:
            for field in self._schema["fields"]:
                if field["name"] not in record:
                    if "default" not in field:
                        raise _error(self.schema_name, field["name"], "is missing")
                    record[field["name"]] = field["default"]

    def _is_avro(self, data: bytes) -> bool:
        """Whether ``data`` is exactly one record of this schema in Avro (the failure path only)."""
        buf = io.BytesIO(data)
        try:
            fastavro.schemaless_reader(buf, self._schema, None)
        except Exception:  # noqa: BLE001 - any failure means "not Avro"
            return False
        return buf.tell() == len(data)


def codec_for(fmt: str, schema_name: str) -> Codec:
    """The codec for ``fmt`` ("avro" or "json") and one schema; raises SerializationError otherwise."""
    if fmt == "avro":
        return AvroCodec(schema_name)
    if fmt == "json":
        return JsonCodec(schema_name)
    raise SerializationError(f"serializer must be 'avro' or 'json', got {fmt!r}")


#: ``SerializationError.field`` when the bytes as a whole are not one record.
PAYLOAD = "payload"
#: ``SerializationError.field`` when the bytes are a record of the other format.
CONTENT_TYPE_FIELD = "content-type"
_PSEUDO_FIELDS = (PAYLOAD, CONTENT_TYPE_FIELD)


def _error(schema_name: str, field: str, detail: str) -> SerializationError:
    """The error for ``field``: a record field is quoted as ``field 'x'``; payload-wide details name themselves."""
    where = "" if field in _PSEUDO_FIELDS else f"field {field!r} "
    return SerializationError(f"{schema_name}: {where}{detail}", field=field)


def _mismatch(schema_name: str, record: Any, exc: Exception) -> SerializationError:
    if not isinstance(record, Mapping):
        return _error(schema_name, PAYLOAD, f"expected a mapping for the payload, got {type(record).__name__}")
    schema = load_schema(schema_name)
    for field in schema["fields"]:
        if field["name"] not in record and "default" not in field:
            return _error(schema_name, field["name"], "is missing")
    try:
        fastavro.validation.validate(record, schema, raise_errors=True)
    except fastavro.validation.ValidationError as verr:
        return _validation_error(schema_name, schema, verr)
    return SerializationError(f"{schema_name}: cannot encode record ({type(exc).__name__}: {exc})")


def _validation_error(schema_name: str, schema: Any, exc: fastavro.validation.ValidationError) -> SerializationError:
    """The first of fastavro's errors as ours: ``streams.Event.ts_ms`` becomes the field ``ts_ms``."""
    errors = getattr(exc, "errors", None) or [str(exc)]
    first = errors[0]
    path = str(getattr(first, "field", None) or "")
    prefix = f"{schema['name']}."
    field = path[len(prefix):] if path.startswith(prefix) else path.rsplit(".", 1)[-1]
    if not field:
        return _error(schema_name, PAYLOAD, f"the payload does not match the schema: {str(first)[:200]}")
    datum = getattr(first, "datum", None)
    what = "null" if datum is None else f"{type(datum).__name__} {datum!r:.80}"
    return _error(schema_name, field, f"has an invalid value: {what}")


def _is_json_object(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` is a JSON object (the failure path only: Avro bytes that were JSON)."""
    try:
        return isinstance(orjson.loads(data), dict)
    except orjson.JSONDecodeError:
        return False


@lru_cache(maxsize=None)
def _field_readers(schema_name: str) -> tuple[tuple[str, Any], ...]:
    """Each top-level field of a record schema with its own type parsed as a schema, in order."""
    schema = load_schema(schema_name)
    named: dict[str, Any] = {}
    return tuple((f["name"], fastavro.parse_schema(f["type"], named_schemas=named)) for f in schema["fields"])


def _failing_field(schema_name: str, data: bytes | bytearray | memoryview) -> str:
    """The field being read when decoding ``data`` failed.

    An Avro record is its fields' encodings one after another, so reading them one
    at a time from one buffer finds the first that is truncated or corrupt.
    """
    buf = io.BytesIO(bytes(data))
    for field, field_schema in _field_readers(schema_name):
        try:
            fastavro.schemaless_reader(buf, field_schema, None)
        except Exception:  # noqa: BLE001 - fastavro raises many types on corrupt input
            return field
    return PAYLOAD
