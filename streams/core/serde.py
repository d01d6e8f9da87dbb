"""Avro (fastavro) and JSON (orjson) codecs for the project's records.

One schema per record type lives in ``schemas/*.avsc`` (shipped as package data); it is parsed once and used
for both formats: Avro writes it schemaless (the reader knows the schema, as with a
schema registry's fixed subject), and JSON records are validated against the same
schema on decode, so a JSON producer cannot smuggle in what Avro would refuse.

Every failure is a :class:`~streams.core.errors.SerializationError` naming the schema and,
where fastavro reports one, the field.
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

__all__ = ["Codec", "AvroCodec", "JsonCodec", "codec_for", "load_schema", "schema_files", "CONTENT_TYPE", "Format"]

Format = Literal["avro", "json"]

#: Value of the ``content-type`` header a producer sets, per format.
CONTENT_TYPE: dict[str, bytes] = {"avro": b"application/vnd.streams+avro", "json": b"application/json"}


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


class AvroCodec:
    """Schemaless Avro through fastavro, for one schema."""

    format: Format = "avro"

    def __init__(self, schema_name: str) -> None:
        self.schema_name = schema_name
        self._schema = load_schema(schema_name)

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """Avro binary of ``record``; raises SerializationError naming the schema on a mismatch."""
        buf = io.BytesIO()
        try:
            fastavro.schemaless_writer(buf, self._schema, record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise _mismatch(self.schema_name, record, exc) from exc
        return buf.getvalue()

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record in ``data``; trailing bytes, truncation and bad values are errors."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SerializationError(f"{self.schema_name}: expected bytes, got {type(data).__name__}")
        buf = io.BytesIO(data)
        try:
            record = fastavro.schemaless_reader(buf, self._schema, None)
        except Exception as exc:  # noqa: BLE001 - fastavro raises many types on corrupt input
            raise SerializationError(f"{self.schema_name}: corrupt Avro payload ({type(exc).__name__}: {exc})") from exc
        if buf.tell() != len(data):
            raise SerializationError(f"{self.schema_name}: {len(data) - buf.tell()} trailing bytes after the record")
        if not isinstance(record, dict):
            raise SerializationError(f"{self.schema_name}: payload is not a record")
        return record


class JsonCodec:
    """JSON through orjson; decoded records are validated against the same Avro schema."""

    format: Format = "json"

    def __init__(self, schema_name: str) -> None:
        self.schema_name = schema_name
        self._schema = load_schema(schema_name)

    def encode(self, record: Mapping[str, Any]) -> bytes:
        """UTF-8 JSON of ``record`` (bytes values are not JSON: use Avro for records holding bytes)."""
        try:
            return orjson.dumps(record)
        except TypeError as exc:
            raise _mismatch(self.schema_name, record, exc) from exc

    def decode(self, data: bytes) -> dict[str, Any]:
        """The record in ``data``, with defaults filled in; raises SerializationError naming the field."""
        try:
            record = orjson.loads(data)
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise SerializationError(f"{self.schema_name}: invalid JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise SerializationError(f"{self.schema_name}: JSON payload is a {type(record).__name__}, not an object")
        for field in self._schema["fields"]:
            if field["name"] not in record and "default" in field:
                record[field["name"]] = field["default"]
        # The boolean check is ~4x cheaper; only a failing record pays for the detailed one.
        if not fastavro.validation.validate(record, self._schema, raise_errors=False, strict=True):
            try:
                fastavro.validation.validate(record, self._schema, raise_errors=True, strict=True)
            except fastavro.validation.ValidationError as exc:
                raise SerializationError(f"{self.schema_name}: {_first_error(exc)}") from exc
        return record


def codec_for(fmt: str, schema_name: str) -> Codec:
    """The codec for ``fmt`` ("avro" or "json") and one schema; raises SerializationError otherwise."""
    if fmt == "avro":
        return AvroCodec(schema_name)
    if fmt == "json":
        return JsonCodec(schema_name)
    raise SerializationError(f"serializer must be 'avro' or 'json', got {fmt!r}")


def _mismatch(schema_name: str, record: Any, exc: Exception) -> SerializationError:
    if not isinstance(record, Mapping):
        return SerializationError(f"{schema_name}: expected a mapping, got {type(record).__name__}")
    schema = load_schema(schema_name)
    try:
        fastavro.validation.validate(record, schema, raise_errors=True)
    except fastavro.validation.ValidationError as verr:
        return SerializationError(f"{schema_name}: {_first_error(verr)}")
    return SerializationError(f"{schema_name}: cannot encode record ({type(exc).__name__}: {exc})")


def _first_error(exc: fastavro.validation.ValidationError) -> str:
    errors = getattr(exc, "errors", None) or [str(exc)]
    first = errors[0]
    field = getattr(first, "field", None)
    datum = getattr(first, "datum", None)
    if field:
        return f"field {str(field).split('.')[-1]!r}: invalid value {datum!r:.80}"
    return str(first)[:200]
