"""Configuration: one frozen dataclass per part, validated once at the edge.

Every setting has one name (:func:`setting_name`: the field's name, ``<role>_topic``
for a topic), used in the TOML file, as ``STREAMS_<NAME>`` and as the flag
``--<name-with-dashes>``: ``bucket_width`` is ``[worker] bucket_width``,
``STREAMS_BUCKET_WIDTH`` and ``--bucket-width``; ``events_topic`` is ``[topics]
events_topic``, ``STREAMS_EVENTS_TOPIC`` and ``--events-topic``. Each settings class
is built from these sources, later ones winning (:func:`resolve` also says which
source gave each value):

1. its defaults,
2. a TOML file (``[kafka]``, ``[topics]``, ``[producer]``, ``[worker]`` tables),
   named by ``$STREAMS_CONFIG`` (the commands' ``--config``),
3. environment variables ``STREAMS_<NAME>``; librdkafka properties as
   ``STREAMS_KAFKA_<PROPERTY>`` with dots as underscores
   (``STREAMS_KAFKA_SASL_PASSWORD`` is ``sasl.password``),
4. command-line flags, or keyword arguments from code.

The older topic spellings (``STREAMS_EVENTS``, ``[topics] events``) are deprecated
aliases that still work.

Values are coerced to the field's type and checked; a bad one raises
:class:`~streams.core.errors.ConfigError` naming the field, the source and the allowed
range. Client properties that carry credentials (SASL passwords, TLS keys, OAuth
configs) are never shown, by name *and by value*: :func:`redact` masks them in a
config dict, and every secret value a KafkaSettings was built from is remembered
(:func:`remember_secrets`) so :func:`scrub` can replace it wherever it appears in a
text we print or log: error messages, tracebacks, ``repr``, dry-run output, and
every log record once :func:`install_log_redaction` ran (the CLI and the worker do).
``client_properties`` may be a TOML table or a string of ``key=value`` items (one
per line, or comma-separated on one line); see :func:`parse_client_properties`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import tomllib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from streams.core.errors import ConfigError
from streams.core.hotkeys.decider import BalancePolicy
from streams.core.ids.lease import LeaseTerms
from streams.core.routing.placement import HASHES, PLACEMENTS, PLACERS
from streams.core.validate import require, require_duration, require_int, require_topic

__all__ = [
    "KafkaSettings", "TopicNames", "ProducerSettings", "WorkerSettings", "load", "redact", "SECRET_MARKERS",
    "is_secret", "secret_values", "remember_secrets", "known_secrets", "scrub", "install_log_redaction",
    "parse_client_properties", "MASK", "resolve", "Resolved", "Source", "SOURCE_ORDER", "setting_name", "env_var",
    "flag",
]

#: librdkafka property names containing any of these are credentials.
SECRET_MARKERS = ("password", "secret", "jaas", "ssl.key", "keystore", "oauthbearer.config", "token", "credentials")


#: What a credential is replaced with.
MASK = "***"
#: Secret values shorter than this are not scrubbed from free text (masking "1" or
#: "ab" everywhere would garble every message); they are still masked by name.
MIN_SCRUBBED_LENGTH = 4
#: A password inside a JAAS config value (``... password="s3cret";``).
_JAAS_PASSWORD = re.compile(r"""password\s*=\s*"([^"]*)"|password\s*=\s*'([^']*)'""")

_known: set[str] = set()
_known_lock = threading.Lock()


def is_secret(name: str) -> bool:
    """True if the client property ``name`` carries a credential (any of SECRET_MARKERS, any case)."""
    lowered = str(name).lower()
    return any(m in lowered for m in SECRET_MARKERS)


def secret_values(config: Mapping[str, Any]) -> frozenset[str]:
    """The credential values in ``config``: values of secret-named keys, and passwords inside JAAS configs.

    Only values of at least MIN_SCRUBBED_LENGTH characters are returned (see there).
    """
    found: set[str] = set()
    for key, value in config.items():
        if not is_secret(key) or value is None or isinstance(value, bool):
            continue
        text = str(value)
        found.add(text)
        found.update(a or b for a, b in _JAAS_PASSWORD.findall(text))
    return frozenset(v for v in found if len(v) >= MIN_SCRUBBED_LENGTH)


def remember_secrets(values: Mapping[str, Any] | frozenset[str] | set[str]) -> None:
    """Add credential values (a config mapping's, or the values themselves) to the process-wide set :func:`scrub` masks."""
    found = secret_values(values) if isinstance(values, Mapping) else {v for v in values
                                                                         if len(v) >= MIN_SCRUBBED_LENGTH}
    if found:
        with _known_lock:
            _known.update(found)


def known_secrets() -> frozenset[str]:
    """Every credential value remembered so far in this process."""
    with _known_lock:
        return frozenset(_known)


def scrub(text: str, secrets: frozenset[str] | set[str] | None = None) -> str:
    """``text`` with every occurrence of a secret value (default: :func:`known_secrets`) replaced by MASK.

    Longer secrets are replaced first, so one that contains another is masked whole.
    """
    values = known_secrets() if secrets is None else secrets
    for value in sorted(values, key=len, reverse=True):
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a client config with every credential replaced by MASK.

    Secret-named keys are masked whole; any other string value that contains a
    credential (of this config, or one remembered) has it scrubbed.
    """
    secrets = secret_values(config) | known_secrets()
    return {k: (MASK if is_secret(k) else scrub(v, secrets) if isinstance(v, str) else v) for k, v in config.items()}


def install_log_redaction() -> None:
    """Scrub remembered credentials from every log record created from now on, whatever logger or handler.

    Installs a log record factory (idempotent): a record whose formatted message or
    traceback contains a known secret gets the scrubbed text as its message (and
    pre-formatted traceback), so no handler or formatter can print the value.
    """
    current = logging.getLogRecordFactory()
    if getattr(current, "_streams_redacting", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        secrets = known_secrets()
        if not secrets:
            return record
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is the logging module's to report
            return record
        cleaned = scrub(message, secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info), secrets)
        return record

    factory._streams_redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def parse_client_properties(text: str, source: str = "client_properties") -> dict[str, str]:
    """librdkafka properties from a string: ``key=value`` items, one per line, or comma-separated on one line.

    Blank lines and ``#`` comments are skipped. On one line, an item without ``=``
    continues the previous value (``ssl.cipher.suites=A,B`` stays whole). Raises
    ConfigError naming ``source`` and the item's position (never its text: it may be
    a password) for an item without a key.
    """
    lines = [line.strip() for line in text.splitlines()]
    items = [line for line in lines if line and not line.startswith("#")]
    if len(items) == 1:
        items = _comma_items(items[0])
    props: dict[str, str] = {}
    for position, item in enumerate(items, 1):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{source}: item {position} is not key=value (its text is not shown: it may be a "
                              "credential); write client_properties as a TOML table or key=value lines")
        props[key.strip()] = value.strip()
    return props


def _comma_items(line: str) -> list[str]:
    items: list[str] = []
    for part in line.split(","):
        if items and "=" not in part:
            items[-1] += "," + part
        elif part.strip():
            items.append(part.strip())
    return items


@dataclass(frozen=True)
class KafkaSettings:
    """Where the cluster is and how to talk to it.

    ``client_properties`` are passed to librdkafka as they are (``security.protocol``,
    ``sasl.*``, ``ssl.*`` ...): a mapping, or a string parsed by
    :func:`parse_client_properties`. They are redacted from ``repr``, and their
    credential values are remembered for :func:`scrub` as soon as the settings exist.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    client_properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.client_properties, str):
            object.__setattr__(self, "client_properties", parse_client_properties(self.client_properties))
        if not isinstance(self.client_properties, Mapping):
            raise ConfigError("client_properties must be a table of librdkafka properties or key=value lines, "
                              f"got {type(self.client_properties).__name__}")
        remember_secrets(self.client_properties)
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
    routing_maps: str = "streams.routing-maps"
    id_leases: str = "streams.id-leases"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            require_topic(f.name, getattr(self, f.name), template=f.name == "events")


@dataclass(frozen=True)
class ProducerSettings:
    """How ``RoutingProducer`` stamps, routes and encodes.

    With ``id_kind="snowflake"``, ``snowflake_worker`` -1 (the default) leases a
    fleet-unique worker ID through the cluster (:mod:`streams.kafka.leases`); an
    explicit one is leased too, and refused while another producer holds it.
    ``id_lease`` is a lease's length, ``id_lease_reuse_delay`` how long a lapsed ID
    rests before reuse (it must cover twice the clock skew between machines).
    """

    partitions: int = 12
    placement: str = "mod"
    hash: str = "murmur2"
    bucket_width: str = "1m"
    grace: str = "10s"
    serializer: str = "json"
    id_kind: str = "uuid7"
    snowflake_worker: int = -1
    id_lease: str = "30s"
    id_lease_reuse_delay: str = "30s"

    def __post_init__(self) -> None:
        require_int("partitions", self.partitions, 1, 100_000)
        require((self.placement, self.hash) in PLACERS, "placement/hash",
                f"a pair of {PLACEMENTS} and {HASHES}", (self.placement, self.hash))
        require(self.serializer in ("json", "avro"), "serializer", "'json' or 'avro'", self.serializer)
        require(self.id_kind in ("uuid7", "snowflake"), "id_kind", "'uuid7' or 'snowflake'", self.id_kind)
        require_int("snowflake_worker (-1: lease a free one)", self.snowflake_worker, -1, 1023)
        self.lease_terms()  # validates id_lease and id_lease_reuse_delay, naming them

    def lease_terms(self) -> LeaseTerms:
        """The Snowflake worker-ID lease terms; raises ConfigError naming the setting out of range."""
        try:
            return LeaseTerms(lease_ms=require_duration("id_lease", self.id_lease),
                              reuse_delay_ms=require_duration("id_lease_reuse_delay", self.id_lease_reuse_delay))
        except ConfigError as exc:
            text = str(exc)
            named = {"lease_ms": "id_lease", "reuse_delay_ms": "id_lease_reuse_delay"}
            field = text.split(" ", 1)[0]
            raise ConfigError(named.get(field, field) + text[len(field):]) from None


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
    ``dedup_ids`` counts an event once per (bucket, source partition) while the
    bucket is open (its identity: ID, key, time and value). ``group_protocol``: the
    consumer groups' protocol, ``consumer`` (KIP-848, incremental), ``classic``, or
    ``auto`` (KIP-848 where the cluster offers it). ``broker_outage_timeout``: how long
    the worker waits out an unreachable cluster before it stops. ``instance``: this
    worker's name in summaries and notices ("" picks host, pid and a random suffix).
    ``tick``: how often each loop closes due buckets, persists and commits.
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
    balance_confidence: float = BalancePolicy.confidence  # the decider's own defaults
    balance_evidence_windows: int = BalancePolicy.evidence_windows
    balance_propagation_s: float = BalancePolicy.propagation_s
    sketch_capacity: int = 4096
    metrics_port: int = 0
    session_timeout_s: float = 30.0
    group_protocol: str = "auto"
    tick: str = "250ms"
    broker_outage_timeout: str = "5m"
    instance: str = ""

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
        require(self.group_protocol in ("auto", "consumer", "classic"), "group_protocol",
                "'auto', 'consumer' (KIP-848) or 'classic'", self.group_protocol)
        require(1_000 <= require_duration("broker_outage_timeout", self.broker_outage_timeout) <= 86_400_000,
                "broker_outage_timeout", "a duration from 1s to 1d", self.broker_outage_timeout)
        require(len(self.instance) <= 200, "instance", "at most 200 characters", self.instance)
        require(10 <= require_duration("tick", self.tick) <= 60_000, "tick", "a duration from 10ms to 1m", self.tick)

    @property
    def outage_s(self) -> float:
        """``broker_outage_timeout`` in seconds."""
        return require_duration("broker_outage_timeout", self.broker_outage_timeout) / 1000

    @property
    def events_group(self) -> str:
        """The consumer group stage 1 reads the events topic in (``<app_id>-events``): the group whose lag
        on the events topic is the worker's backlog."""
        return f"{self.app_id}-events"

    @property
    def partials_group(self) -> str:
        """The consumer group stage 2 reads the partials topic in (``<app_id>``, as faust named it before)."""
        return self.app_id

    @property
    def decider_group(self) -> str:
        """The consumer group the decider reads the sketches topic in (one partition: one decider)."""
        return f"{self.app_id}-decider"

    @property
    def stage2_changelog(self) -> str:
        """The compacted topic stage 2's state is changelogged to, partition p for partials partition p."""
        return f"{self.app_id}-stage2-changelog"

    @property
    def stage1_changelog(self) -> str:
        """The compacted topic stage 1's state is changelogged to, partition p for source partition p."""
        return f"{self.app_id}-stage1-changelog"

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
    "enabled": "balance_enabled", "confidence": "balance_confidence", "evidence_windows": "balance_evidence_windows",
    "propagation_s": "balance_propagation_s",
}




T = TypeVar("T")
_SECTIONS = {KafkaSettings: "kafka", TopicNames: "topics", ProducerSettings: "producer", WorkerSettings: "worker"}

#: Where settings come from, lowest precedence first: each later source overrides the earlier ones.
SOURCE_ORDER = ("default", "file", "env", "flag")


def setting_name(cls: type, field_name: str) -> str:
    """The one name of a settings field, used in TOML, in ``STREAMS_<NAME>`` and in ``--<name-with-dashes>``.

    It is the field's name, except for :class:`TopicNames`, whose fields are roles:
    ``events`` is the setting ``events_topic`` (``[topics] events_topic``,
    ``STREAMS_EVENTS_TOPIC``, ``--events-topic``).
    """
    return f"{field_name}_topic" if cls is TopicNames else field_name


def env_var(name: str) -> str:
    """The environment variable of setting ``name``: ``STREAMS_<NAME>``."""
    return f"STREAMS_{name.upper()}"


def flag(name: str) -> str:
    """The command-line flag of setting ``name``: ``--<name-with-dashes>``."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Source:
    """Where one setting's value came from: ``kind`` is one of SOURCE_ORDER, ``detail`` says which one exactly.

    ``detail``: the variable (``STREAMS_BUCKET_WIDTH``), the file and table
    (``/etc/streams.toml [worker]``), the flag (``--bucket-width``), or ``""`` for a default.
    """

    kind: str
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.detail}".strip()


@dataclass(frozen=True)
class Resolved:
    """Settings and, for each field, the :class:`Source` its value came from."""

    settings: Any
    sources: Mapping[str, Source]

    def to_record(self, cls: type) -> dict[str, dict[str, Any]]:
        """``{setting name: {"value": ..., "source": kind, "from": detail}}``, credentials redacted."""
        record = {}
        for f in dataclasses.fields(self.settings):
            value = getattr(self.settings, f.name)
            if isinstance(value, Mapping):
                value = redact(value)
            source = self.sources[f.name]
            record[setting_name(cls, f.name)] = {"value": value, "source": source.kind, "from": source.detail}
        return record


def load(cls: type[T], *, toml_path: str | Path | None = None, env: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build settings ``cls`` from defaults, a TOML file, ``STREAMS_*`` variables and ``overrides``.

    ``toml_path`` defaults to ``$STREAMS_CONFIG`` when set. Raises ConfigError for an
    unknown field, a value that does not convert to the field's type, or one out of range.
    """
    return resolve(cls, toml_path=toml_path, env=env, overrides=overrides).settings  # type: ignore[no-any-return]


def resolve(cls: type, *, toml_path: str | Path | None = None, env: Mapping[str, str] | None = None,
            flags: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None) -> Resolved:
    """Settings ``cls`` and where each value came from, from the sources in SOURCE_ORDER.

    Defaults, then the TOML file (``toml_path``, default ``$STREAMS_CONFIG``; table
    ``[kafka]``, ``[topics]``, ``[producer]`` or ``[worker]``), then ``STREAMS_<NAME>``
    variables of ``env`` (default ``os.environ``), then ``flags`` (field -> value,
    already parsed, reported as ``--<name>``), then ``overrides`` (field -> value
    from code, reported as ``flag`` too). Names are :func:`setting_name`'s; the
    older spellings of topic settings (``STREAMS_EVENTS``, ``[topics] events``)
    still work as deprecated aliases, the new name winning when both are set. Raises
    ConfigError for an unknown setting, a value that does not convert to the
    field's type, or one out of range.
    """
    env = os.environ if env is None else env
    hints = get_type_hints(cls)
    fields = [f.name for f in dataclasses.fields(cls)]
    by_name = {setting_name(cls, name): name for name in fields}
    aliases = {name: name for name in fields if setting_name(cls, name) != name}  # old spelling -> field
    values: dict[str, Any] = {}
    sources: dict[str, Source] = dict.fromkeys(fields, Source("default"))
    toml_path = toml_path or env.get("STREAMS_CONFIG")
    if toml_path:
        section = _SECTIONS[cls]
        try:
            table = tomllib.loads(Path(toml_path).read_text()).get(section, {})
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"config file {toml_path}: {exc}") from exc
        for key in sorted(table, key=lambda k: k in by_name):  # an alias first, so the new name wins
            name = by_name.get(key) or aliases.get(key)
            if name is None:
                raise ConfigError(f"config file {toml_path}: [{section}] has no setting {key!r}")
            if key in aliases:
                _deprecated(f"[{section}] {key}", f"[{section}] {setting_name(cls, name)}")
            values[name] = _coerce(key, hints[name], table[key], f"{toml_path} [{section}]")
            sources[name] = Source("file", f"{toml_path} [{section}]" + (
                f" {key} (deprecated: use {setting_name(cls, name)})" if key in aliases else ""))
    for name in fields:
        if hints[name] is Mapping[str, str]:
            continue
        for var in (env_var(name), env_var(setting_name(cls, name))) if name in aliases else (env_var(name),):
            if var in env:  # the alias first, so the new name wins
                if var != env_var(setting_name(cls, name)):
                    _deprecated(var, env_var(setting_name(cls, name)))
                values[name] = _coerce(setting_name(cls, name), hints[name], env[var], f"${var}")
                new = env_var(setting_name(cls, name))
                sources[name] = Source("env", var if var == new else f"{var} (deprecated: use {new})")
    if cls is KafkaSettings:
        # STREAMS_KAFKA_SASL_PASSWORD=... becomes the librdkafka property sasl.password.
        props = dict(values.get("client_properties", {}))
        given = {var[len("STREAMS_KAFKA_"):].lower().replace("_", "."): value
                 for var, value in env.items() if var.startswith("STREAMS_KAFKA_")}
        props.update(given)
        remember_secrets(props)  # before anything below can fail with a message
        if props:
            values["client_properties"] = props
        if given:
            sources["client_properties"] = Source("env", "STREAMS_KAFKA_*")
    for given_values, detail in ((flags or {}, None), (overrides or {}, "argument")):
        for key, value in given_values.items():
            if key not in fields:
                raise ConfigError(f"{cls.__name__} has no setting {key!r}")
            values[key] = value
            sources[key] = Source("flag", detail or flag(setting_name(cls, key)))
    return Resolved(cls(**values), sources)


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=4)


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
            props = {str(k): v for k, v in raw.items()}
            remember_secrets(props)
            return props
        elif isinstance(raw, str):
            props = parse_client_properties(raw, f"{name} (from {source})")
            remember_secrets(props)
            return props
    except (TypeError, ValueError) as exc:  # int("x"), float("x"), int(float("inf")) ...
        if isinstance(exc, ConfigError):
            raise
    # A table-shaped setting's value may hold credentials whatever its name: never echo it.
    shown = MASK if is_secret(name) or hint not in (bool, int, float, str) else scrub(repr(raw))
    raise ConfigError(f"{name} (from {source}) must be {getattr(hint, '__name__', hint)}, got {shown}")
