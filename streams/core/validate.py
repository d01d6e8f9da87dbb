"""One way to reject a bad setting (``require``) or a malformed record (``require_fields``).

Every settings class validates through it, so every message reads the same:
``<name> must be <allowed>, got <value>``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.core.errors import ConfigError, StreamsError

__all__ = ["require", "require_fields"]


def require(ok: bool, name: str, allowed: str, value: Any, error: type[StreamsError] = ConfigError) -> None:
    """Raise ``error`` (ConfigError by default) naming the field, the allowed range and the value, unless ``ok``."""
    if not ok:
        raise error(f"{name} must be {allowed}, got {value!r}")


def require_fields(record: object, fields: frozenset[str], what: str, error: type[StreamsError]) -> None:
    """Raise ``error`` unless ``record`` is a mapping with exactly ``fields`` (names the missing or unknown ones)."""
    if not isinstance(record, Mapping):
        raise error(f"{what} must be a mapping, got {type(record).__name__}")
    missing = fields - record.keys()
    if missing:
        raise error(f"{what} is missing field(s) {sorted(missing)}")
    extra = record.keys() - fields
    if extra:
        raise error(f"{what} has unknown field(s) {sorted(map(str, extra))}")
