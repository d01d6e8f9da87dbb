"""Configuration: one frozen dataclass per part, validated once at the edge.

Each settings class can be built three ways, later sources winning:

1. its defaults,
2. a TOML file (``[kafka]``, ``[topics]``, ``[producer]``, ``[worker]`` tables),
3. environment variables ``STREAMS_<FIELD>`` (e.g. ``STREAMS_BOOTSTRAP_SERVERS``,
   ``STREAMS_BUCKET_WIDTH``); librdkafka properties as ``STREAMS_KAFKA_<PROPERTY>``
   with dots as underscores (``STREAMS_KAFKA_SASL_PASSWORD`` is ``sasl.password``),
4. keyword arguments.

Values are coerced to the field's type and checked; a bad one raises
:class:`~streams.core.errors.ConfigError` naming the field, the source and the allowed
range. Client properties that carry credentials (SASL passwords, TLS keys, OAuth
configs) are never shown: ``repr`` and every error use :func:`redact`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from streams.core.errors import ConfigError
from streams.core.hotkeys.decider import BalancePolicy
from streams.core.routing.placement import HASHES, PLACEMENTS, PLACERS
from streams.core.validate import require, require_duration, require_int, require_topic

__all__ = ["KafkaSettings", "TopicNames", "ProducerSettings", "WorkerSettings", "load", "redact", "SECRET_MARKERS"]

#: librdkafka property names containing any of these are credentials.
SECRET_MARKERS = ("password", "secret", "jaas", "ssl.key", "keystore", "oauthbearer.config", "token", "credentials")


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config with every credential replaced by ``'***'``."""
    return {k: ("***" if any(m in k.lower() for m in SECRET_MARKERS) else v) for k, v in config.items()}


@dataclass(frozen=True)
class KafkaSettings:
    """Where the cluster is and how to talk to it.

    ``client_properties`` are passed to librdkafka as they are (``security.protocol``,
    ``sasl.*``, ``ssl.*`` ...); they are redacted from ``repr``.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    client_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        require(bool(self.bootstrap_servers.strip()), "bootstrap_servers", "a non-empty host:port list", self.bootstrap_servers)
        for key, value in self.client_properties.items():
            if not isinstance(key, str) or not isinstance(value, (str, int, float, bool)):
                raise ConfigError(f"client_properties: {key!r} must map to a str, int, float or bool")

    def __repr__(self) -> str:
        return f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, client_properties={redact(self.client_properties)!r})"

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """A confluent-kafka config dict: bootstrap servers, client properties, then ``extra``."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.client_properties, **extra}


@dataclass(frozen=True)
class TopicNames:
    """The project's topics. ``events`` may hold ``{bucket}`` for topic-per-bucket mode."""

    events: str = "streams.events"
    hot_keys: str = "streams.hot-keys"
    sketches: str = "streams.hot-key-sketches"
    partials: str = "streams.partials"
    aggregates: str = "streams.aggregates"
    bucket_closed: str = "streams.bucket-closed"
    late_events: str = "streams.late-events"
    dead_letters: str = "streams.dead-letters"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            require_topic(f.name, getattr(self, f.name), template=f.name == "events")


@dataclass(frozen=True)
class ProducerSettings:
    """How ``RoutingProducer`` stamps, routes and encodes."""

    partitions: int = 12
    placement: str = "mod"
    hash: str = "murmur2"
    bucket_width: str = "1m"
    grace: str = "10s"
    serializer: str = "json"
    id_kind: str = "uuid7"
    snowflake_worker: int = 0

    def __post_init__(self) -> None:
        require_int("partitions", self.partitions, 1, 100_000)
        require((self.placement, self.hash) in PLACERS, "placement/hash",
                f"a pair of {PLACEMENTS} and {HASHES}", (self.placement, self.hash))
        require(self.serializer in ("json", "avro"), "serializer", "'json' or 'avro'", self.serializer)
        require(self.id_kind in ("uuid7", "snowflake"), "id_kind", "'uuid7' or 'snowflake'", self.id_kind)
        require_int("snowflake_worker", self.snowflake_worker, 0, 1023)


@dataclass(frozen=True)
class WorkerSettings:
    """The faust workers: identity, time buckets, the load-aware decider, metrics.

    ``placement`` and ``hash`` must be the producers' (they name each key's hash
    home, which the decider needs to know where unplaced keys' traffic goes).
    ``hot_window_s`` is the measurement window (keys and partition loads); the
    ``balance_*`` settings are :class:`~streams.core.hotkeys.decider.BalancePolicy`'s
    knobs (see :meth:`balance_policy`); ``hot_min_window_events`` is how many events
    the window must hold before the decider trusts it. ``watermark_agreement`` is how
    many records of a partition must reach an event time before its watermark moves
    there (2: one record with a bad clock cannot close buckets early);
    ``dedup_ids`` counts an event ID once per (bucket, source partition) while the
    bucket is open.
    """

    app_id: str = "streams-worker"
    partitions: int = 12
    bucket_width: str = "1m"
    grace: str = "10s"
    allowed_delay: str = "2s"
    idle_timeout: str = "30s"
    watermark_agreement: int = 2
    dedup_ids: bool = True
    retention: str = "1h"
    serializer: str = "json"
    placement: str = "mod"
    hash: str = "murmur2"
    hot_window_s: float = 5.0
    hot_min_window_events: int = 1000
    balance_enabled: bool = True
    balance_moves: bool = True
    balance_target: float = 1.10
    balance_aim: float = 1.05
    balance_min_rate: float = 1.0
    balance_max_keys: int = 256
    balance_max_changes: int = 64
    balance_hold_s: float = 10.0
    sketch_capacity: int = 4096
    metrics_port: int = 0
    session_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        require_int("partitions", self.partitions, 1, 100_000)
        for name in ("allowed_delay", "idle_timeout", "retention"):
            require_duration(name, getattr(self, name))
        require_int("watermark_agreement", self.watermark_agreement, 1, 16)
        require(self.serializer in ("json", "avro"), "serializer", "'json' or 'avro'", self.serializer)
        require((self.placement, self.hash) in PLACERS, "placement/hash",
                f"a pair of {PLACEMENTS} and {HASHES}", (self.placement, self.hash))
        require(self.hot_window_s > 0, "hot_window_s", "a number > 0", self.hot_window_s)
        require(self.hot_min_window_events >= 0, "hot_min_window_events", "an int >= 0",
                 self.hot_min_window_events)
        self.balance_policy()  # validates the balance_* settings, naming them
        require_int("sketch_capacity", self.sketch_capacity, 16, 1_000_000)
        require_int("metrics_port (0: off)", self.metrics_port, 0, 65535)
        require(3 <= self.session_timeout_s <= 600, "session_timeout_s", "a number of seconds in [3, 600]",
                 self.session_timeout_s)

    def balance_policy(self) -> BalancePolicy:
        """The decider's policy from the ``balance_*`` settings (``settle_s`` is the window).

        Raises ConfigError naming the setting (both, for an inconsistent pair such as
        ``balance_aim`` above ``balance_target``).
        """
        try:
            return BalancePolicy(**{field: getattr(self, setting) for field, setting in BALANCE_SETTINGS.items()})
        except ConfigError as exc:
            text = str(exc)
            field = text.split(" ", 1)[0]
            raise ConfigError(BALANCE_SETTINGS.get(field, field) + text[len(field):]) from None


#: BalancePolicy field -> the WorkerSettings field that sets it.
BALANCE_SETTINGS = {
    "partitions": "partitions", "balance_target": "balance_target", "balance_aim": "balance_aim",
    "min_rate": "balance_min_rate", "max_keys": "balance_max_keys", "max_changes": "balance_max_changes",
    "hold_s": "balance_hold_s", "settle_s": "hot_window_s", "allow_moves": "balance_moves",
    "enabled": "balance_enabled",
}




T = TypeVar("T")
_SECTIONS = {KafkaSettings: "kafka", TopicNames: "topics", ProducerSettings: "producer", WorkerSettings: "worker"}


def load(cls: type[T], *, toml_path: str | Path | None = None, env: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build settings ``cls`` from defaults, a TOML file, ``STREAMS_*`` variables and ``overrides``.

    ``toml_path`` defaults to ``$STREAMS_CONFIG`` when set. Raises ConfigError for an
    unknown field, a value that does not convert to the field's type, or one out of range.
    """
    env = os.environ if env is None else env
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {}
    toml_path = toml_path or env.get("STREAMS_CONFIG")
    if toml_path:
        try:
            table = tomllib.loads(Path(toml_path).read_text()).get(_SECTIONS[cls], {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {toml_path}: {exc}") from exc
        for key, value in table.items():
            if key not in names:
                raise ConfigError(f"config file {toml_path}: [{_SECTIONS[cls]}] has no setting {key!r}")
            values[key] = _coerce(key, hints[key], value, f"{toml_path} [{_SECTIONS[cls]}]")
    for name in names:
        var = f"STREAMS_{name.upper()}"
        if var in env and hints[name] is not Mapping[str, str]:
            values[name] = _coerce(name, hints[name], env[var], f"${var}")
    if cls is KafkaSettings:
        # STREAMS_KAFKA_SASL_PASSWORD=... becomes the librdkafka property sasl.password.
        props = dict(values.get("client_properties", {}))
        props.update({var[len("STREAMS_KAFKA_"):].lower().replace("_", "."): value
                      for var, value in env.items() if var.startswith("STREAMS_KAFKA_")})
        if props:
            values["client_properties"] = props
    for key, value in overrides.items():
        if key not in names:
            raise ConfigError(f"{cls.__name__} has no setting {key!r}")
        values[key] = value
    return cls(**values)


def _coerce(name: str, hint: Any, raw: Any, source: str) -> Any:
    """``raw`` (from the TOML file or an environment variable) as a ``hint``; raises ConfigError naming the source."""
    try:
        if hint is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
        elif hint is int:
            if not (isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer())):
                return int(raw)
        elif hint is float:
            if not isinstance(raw, bool):
                return float(raw)
        elif hint is str:
            if isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
                return str(raw)
        elif isinstance(raw, Mapping):
            return {str(k): v for k, v in raw.items()}
    except (TypeError, ValueError):  # int("x"), float("x"), int(float("inf")) ...
        pass
    shown = "***" if any(m in name for m in SECRET_MARKERS) else repr(raw)
    raise ConfigError(f"{name} (from {source}) must be {getattr(hint, '__name__', hint)}, got {shown}")
