"""One way to reject a bad setting: ``require(ok, name, allowed, value)``.

Every settings class validates through it, so every message reads the same:
``<name> must be <allowed>, got <value>``.
"""

from __future__ import annotations

from typing import Any

from streams.errors import ConfigError, StreamsError

__all__ = ["require"]


def require(ok: bool, name: str, allowed: str, value: Any, error: type[StreamsError] = ConfigError) -> None:
    """Raise ``error`` (ConfigError by default) naming the field, the allowed range and the value, unless ``ok``."""
    if not ok:
        raise error(f"{name} must be {allowed}, got {value!r}")
