"""Topic administration: the project's topics with the right configs, and bucket-topic housekeeping.

An edge module (it talks to the cluster through ``confluent_kafka.admin.AdminClient``):

* :func:`project_topic_specs` says what the project's topics (:class:`~streams.core.config.TopicNames`)
  should look like. Topics holding the *latest value per key* are compacted:
  ``hot_keys`` (one notice per key), ``aggregates`` (a late correction replaces the
  value emitted at close).
  Streams of facts use the delete policy: ``events``, ``sketches``, ``partials``,
  ``late_events``, ``dead_letters`` and ``bucket_closed``. Control topics
  (``sketches``, ``hot_keys``, ``bucket_closed``, ``dead_letters``)
  get ``control_partitions`` (1: one ordered log, and one hot-key decider reading
  the sketches), data topics ``partitions``; the same counts the faust app creates.
  A topic template (``events.{bucket}``) is not a topic: :func:`roll_bucket_topics`
  creates its topics bucket by bucket.
* :func:`ensure_topics` creates what is missing and waits until the cluster's
  metadata shows every topic. A spec with the broker-default replication factor
  (-1) gets ``min(3, brokers)`` replicas and, unless its config sets it,
  ``min.insync.replicas`` 2 on three or more replicas (1 otherwise): a three-broker
  cluster keeps accepting ``acks=all`` writes with one broker down and loses
  nothing acknowledged (:func:`durable_spec`); :func:`describe_topics` reads partitions and configs
  back; :func:`topic_partitions` is the cheap existence check.
* :func:`roll_bucket_topics` carries out :func:`streams.core.topicplan.plan_bucket_topics`
  (create the current and next ``ahead`` bucket topics, each with the partition count
  of the routing map in force for its bucket; delete the expired ones that
  :func:`~streams.core.topicplan.gate_deletions` finds safe: closed, and consumed to
  the end by the worker group, read with :func:`group_progress`), or with
  ``dry_run`` only reports the plan.
* :func:`add_partitions` grows topics (``streams topics grow``).

Every call is bounded by ``timeout_s``: an unreachable cluster is a
:class:`TopicAdminError` after at most about that long, never a hang. ``admin_config``
is a confluent-kafka config dict; errors show its ``bootstrap.servers`` only.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ClusterMetadata,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from streams.core.config import TopicNames, WorkerSettings, redact
from streams.core.errors import ConfigError, StreamsError
from streams.core.routing.placement import MAX_PARTITIONS
from streams.core.routing.router import RoutingMap
from streams.core.time.buckets import TimeBuckets
from streams.core.topicplan import (
    PartitionProgress,
    TopicPlan,
    gate_deletions,
    partitions_in_force,
    plan_bucket_topics,
)
from streams.core.validate import BUCKET_PLACEHOLDER, require_int, require_topic
from streams.kafka.clients import new_admin, new_consumer

__all__ = [
    "COMPACTED_ROLES",
    "CONTROL_ROLES",
    "EnsuredTopic",
    "RollResult",
    "TopicAdminError",
    "TopicInfo",
    "TopicNotFoundError",
    "TopicSpec",
    "add_partitions",
    "broker_count",
    "consumer_protocol_offered",
    "describe_topics",
    "durable_spec",
    "ensure_topics",
    "group_progress",
    "project_topic_specs",
    "id_leases_spec",
    "roll_bucket_topics",
    "list_topic_names",
    "topic_partitions",
]

#: TopicNames fields whose topics are compacted (latest value per key).
COMPACTED_ROLES = frozenset({"hot_keys", "aggregates", "routing_maps"})
#: TopicNames fields whose topics are small control logs (``control_partitions``).
CONTROL_ROLES = frozenset({"sketches", "hot_keys", "bucket_closed", "dead_letters", "routing_maps"})

_UNREACHABLE = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                          KafkaError._RESOLVE})
_POLL_S = 0.1


class TopicAdminError(StreamsError):
    """The cluster could not be reached in time, or refused a topic operation; the message says which."""


class TopicNotFoundError(TopicAdminError):
    """A topic that must exist does not."""


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create: name, partitions (1..MAX_PARTITIONS), configs, replication (-1: broker default).

    ``role`` is the :class:`TopicNames` field it plays ("" for none). Raises
    ConfigError for a template name, a name outside Kafka's rule
    (:func:`~streams.core.validate.require_topic`) or an out-of-range count.
    """

    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)
    role: str = ""
    replication_factor: int = -1

    def __post_init__(self) -> None:
        if isinstance(self.name, str) and BUCKET_PLACEHOLDER in self.name:
            raise ConfigError(f"{self.name!r} is a topic template, not a topic: roll creates its topics")
        require_topic("topic name", self.name, template=False)
        require_int(f"partitions of {self.name!r}", self.partitions, 1, MAX_PARTITIONS)
        if not (isinstance(self.replication_factor, int) and (self.replication_factor == -1
                                                               or 1 <= self.replication_factor <= 32767)):
            raise ConfigError(f"replication factor must be -1 (broker default) or 1..32767, "
                              f"got {self.replication_factor!r}")


def project_topic_specs(
    names: TopicNames,
    *,
    partitions: int,
    control_partitions: int = 1,
    replication_factor: int = -1,
    retention_ms: int | None = None,
) -> tuple[TopicSpec, ...]:
    """The specs of the project's topics, in TopicNames order, templates left out.

    Compacted roles get ``cleanup.policy=compact``; the others ``cleanup.policy=delete``
    and, when ``retention_ms`` is given, ``retention.ms`` (-1: forever). Raises
    ConfigError for out-of-range counts or retention.
    """
    if retention_ms is not None:
        require_int("retention_ms (-1: keep forever)", retention_ms, -1)
    specs = []
    for f in dataclasses.fields(names):
        name = getattr(names, f.name)
        if BUCKET_PLACEHOLDER in name:
            continue
        if f.name == "id_leases":
            specs.append(dataclasses.replace(id_leases_spec(name), replication_factor=replication_factor))
            continue
        if f.name in COMPACTED_ROLES:
            config = {"cleanup.policy": "compact"}
        else:
            config = {"cleanup.policy": "delete"}
            if retention_ms is not None:
                config["retention.ms"] = str(retention_ms)
        count = control_partitions if f.name in CONTROL_ROLES else partitions
        specs.append(TopicSpec(name, count, config, f.name, replication_factor))
    return tuple(specs)


def id_leases_spec(name: str) -> TopicSpec:
    """The Snowflake worker-ID leases topic (:mod:`streams.kafka.leases`).

    One partition, so the whole fleet reads one order of claims; the broker's clock on
    every record (``LogAppendTime``), so claims are judged by one clock; an hour of
    history in ten-minute segments, so a producer starting up reads little (a lease
    lasts at most ten minutes, so nothing older matters).
    """
    return TopicSpec(name, 1, {"cleanup.policy": "delete", "message.timestamp.type": "LogAppendTime",
                               "retention.ms": "3600000", "segment.ms": "600000"}, "id_leases")


# --- create, describe, check -----------------------------------------------------------


#: The most replicas a topic is given when its spec leaves the count to the cluster.
MAX_DEFAULT_REPLICAS = 3


def durable_spec(spec: TopicSpec, brokers: int) -> TopicSpec:
    """``spec`` made durable for a cluster of ``brokers``, keeping what it set explicitly.

    Replication factor -1 becomes ``min(3, brokers)``; ``min.insync.replicas``, if
    the config does not set it, becomes 2 for three or more replicas, else 1.
    """
    replicas = spec.replication_factor
    if replicas == -1:
        replicas = max(1, min(MAX_DEFAULT_REPLICAS, brokers))
    config = dict(spec.config)
    config.setdefault("min.insync.replicas", "2" if replicas >= 3 else "1")
    return dataclasses.replace(spec, config=config, replication_factor=replicas)


@dataclass(frozen=True)
class EnsuredTopic:
    """A topic after :func:`ensure_topics`: ``created`` now, or already there; its partition count."""

    name: str
    created: bool
    partitions: int


def ensure_topics(admin_config: Mapping[str, Any], specs: Iterable[TopicSpec], *,
                  timeout_s: float = 10.0) -> tuple[EnsuredTopic, ...]:
    """Create each topic of ``specs`` that does not exist; wait until all show in metadata.

    An existing topic is left as it is (its partition count is reported, its configs
    are not changed). Raises TopicAdminError if the cluster cannot be reached or
    refuses a creation, or a topic does not show up within ``timeout_s``.
    """
    specs = tuple(specs)
    admin = _admin(admin_config)
    md = _metadata(admin, admin_config, timeout_s)
    missing = [durable_spec(s, len(md.brokers)) for s in specs if s.name not in md.topics]
    created = set(_create(admin, missing, timeout_s))
    partitions = _wait_for(admin, admin_config, [s.name for s in specs], present=True, timeout_s=timeout_s)
    return tuple(EnsuredTopic(s.name, s.name in created, partitions[s.name]) for s in specs)


def broker_count(admin_config: Mapping[str, Any], *, timeout_s: float = 10.0) -> int:
    """How many brokers the cluster's metadata lists; raises TopicAdminError if it cannot be reached."""
    admin = _admin(admin_config)
    return len(_metadata(admin, admin_config, timeout_s).brokers)


#: librdkafka's first release with KIP-848's consumer group protocol generally available (2.12.0).
KIP848_LIBRDKAFKA = 0x020C0000


def consumer_protocol_offered(admin_config: Mapping[str, Any], *, timeout_s: float = 10.0) -> bool:
    """True if this client and the cluster's brokers speak KIP-848's consumer group protocol.

    The broker says so in ``group.coordinator.rebalance.protocols`` (``consumer`` is in it
    by default from Kafka 4.0); librdkafka from 2.12. A cluster that will not describe
    its brokers' configs (ACLs) counts as not offering it: the classic protocol works
    everywhere. Raises TopicAdminError if the cluster cannot be reached.
    """
    if confluent_kafka.libversion()[1] < KIP848_LIBRDKAFKA:
        return False
    admin = _admin(admin_config)
    md = _metadata(admin, admin_config, timeout_s)
    resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in sorted(md.brokers)]
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout_s)
        for future in futures.values():
            entries = future.result(timeout_s + 5)
            entry = entries.get("group.coordinator.rebalance.protocols")
            if entry is None or "consumer" not in str(entry.value).split(","):
                return False
    except (KafkaException, concurrent.futures.TimeoutError):
        return False
    return bool(resources)


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the cluster sees it; partition and config fields are None when it does not exist.

    ``retention_ms`` is -1 for "forever"; ``overrides`` holds the configs set on the
    topic itself (not broker or default values).
    """

    name: str
    role: str
    exists: bool
    partitions: int | None = None
    replication_factor: int | None = None
    cleanup_policy: str | None = None
    retention_ms: int | None = None
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def compacted(self) -> bool:
        """True if ``cleanup.policy`` includes compact."""
        return "compact" in (self.cleanup_policy or "")

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {"name": self.name, "role": self.role, "exists": self.exists, "partitions": self.partitions,
                "replication_factor": self.replication_factor, "cleanup_policy": self.cleanup_policy,
                "retention_ms": self.retention_ms, "compacted": self.compacted, "overrides": dict(self.overrides)}


def describe_topics(admin_config: Mapping[str, Any], topics: Mapping[str, str] | Sequence[str], *,
                    timeout_s: float = 10.0) -> tuple[TopicInfo, ...]:
    """Describe ``topics`` (names, or a mapping name -> role), in the order given.

    Raises TopicAdminError if the cluster cannot be reached or a config lookup fails.
    """
    roles = dict(topics) if isinstance(topics, Mapping) else {name: "" for name in topics}
    admin = _admin(admin_config)
    md = _metadata(admin, admin_config, timeout_s)
    present = [name for name in roles if name in md.topics and md.topics[name].error is None]
    configs = _describe_configs(admin, present, timeout_s) if present else {}
    infos = []
    for name, role in roles.items():
        if name not in present:
            infos.append(TopicInfo(name, role, False))
            continue
        parts = md.topics[name].partitions
        entries = configs[name]
        retention = entries.get("retention.ms")
        infos.append(TopicInfo(
            name, role, True, len(parts),
            len(parts[min(parts)].replicas) if parts else None,
            entries["cleanup.policy"].value if "cleanup.policy" in entries else None,
            int(retention.value) if retention is not None and retention.value is not None else None,
            {k: e.value for k, e in sorted(entries.items()) if _is_topic_override(e)},
        ))
    return tuple(infos)


def topic_partitions(admin_config: Mapping[str, Any], topic: str, *, timeout_s: float = 10.0) -> int:
    """The partition count of ``topic``, read from metadata without creating anything.

    Raises TopicNotFoundError if the topic does not exist, TopicAdminError if the
    cluster cannot be reached within ``timeout_s``.
    """
    md = _metadata(_admin(admin_config), admin_config, timeout_s)
    info = md.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        reason = f" ({info.error.str()})" if info is not None and info.error is not None else ""
        raise TopicNotFoundError(f"topic {topic!r} does not exist on {_where(admin_config)}{reason}")
    return len(info.partitions)


def list_topic_names(admin_config: Mapping[str, Any], *, timeout_s: float = 10.0) -> list[str]:
    """The names of the cluster's topics (internal ones included), read from metadata.

    Raises TopicAdminError if the cluster cannot be reached within ``timeout_s``.
    """
    return list(_metadata(_admin(admin_config), admin_config, timeout_s).topics)


# --- topic-per-bucket housekeeping --------------------------------------------------------


@dataclass(frozen=True)
class RollResult:
    """What a roll planned at ``now_ms`` and, unless ``dry_run``, did.

    ``plan.refused`` lists the due topics kept because deleting them was not safe,
    each with its reasons; ``partitions`` the count each planned topic gets.
    """

    template: str
    now_ms: int
    plan: TopicPlan
    dry_run: bool
    created: tuple[str, ...]
    deleted: tuple[str, ...]
    group: str = ""
    partitions: Mapping[str, int] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {"template": self.template, "now_ms": self.now_ms, "dry_run": self.dry_run, "group": self.group,
                "plan": {"create": list(self.plan.create), "delete": list(self.plan.delete),
                         "refused": [{"topic": r.topic, "reasons": list(r.reasons)} for r in self.plan.refused]},
                "partitions": dict(self.partitions), "created": list(self.created), "deleted": list(self.deleted)}


#: The consumer group whose progress guards deletions unless told otherwise: the workers' default app id.
DEFAULT_GROUP = WorkerSettings.app_id


def roll_bucket_topics(
    admin_config: Mapping[str, Any],
    template: str,
    buckets: TimeBuckets,
    *,
    ahead: int,
    retention_ms: int,
    partitions: int,
    maps: Sequence[RoutingMap] = (),
    group: str = DEFAULT_GROUP,
    replication_factor: int = -1,
    now_ms: int | None = None,
    dry_run: bool = False,
    timeout_s: float = 10.0,
) -> RollResult:
    """Plan with :func:`plan_bucket_topics` against the cluster's topics, then carry it out.

    Creates the planned topics (delete policy, replicas as :func:`durable_spec`),
    each with the partition count of the routing map of ``maps`` in force for its
    bucket (:func:`~streams.core.topicplan.partitions_in_force`), ``partitions`` when
    none is. Deletes the expired topics that are safe to delete
    (:func:`~streams.core.topicplan.gate_deletions`: the bucket closed, ``buckets``'
    grace after its end, and ``group`` has consumed every partition to its end, read
    by :func:`group_progress`); the others are kept and listed in ``plan.refused``.
    Waits until metadata shows the changes; with ``dry_run`` changes nothing (the
    group's progress is still read, so the refusals are reported). ``now_ms`` defaults
    to the wall clock. Raises ConfigError for a bad template, ``ahead`` or
    ``retention_ms``; TopicAdminError as ensure_topics, or if the group's offsets
    cannot be read (then nothing is deleted).
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    admin = _admin(admin_config)
    md = _metadata(admin, admin_config, timeout_s)
    due = plan_bucket_topics(template, buckets, now, ahead, retention_ms, md.topics)
    counts = partitions_in_force(due.create, template, buckets, maps, partitions)
    progress = group_progress(admin_config, group, due.delete, timeout_s=timeout_s) if due.delete else {}
    plan = gate_deletions(due, template, buckets, now_ms=now, retention_ms=retention_ms, group=group,
                          progress=progress)
    if dry_run:
        return RollResult(template, now, plan, True, (), (), group, counts)
    specs = [durable_spec(TopicSpec(name, counts[name], {"cleanup.policy": "delete"}, "", replication_factor),
                          len(md.brokers)) for name in plan.create]
    created = _create(admin, specs, timeout_s)
    _wait_for(admin, admin_config, plan.create, present=True, timeout_s=timeout_s)
    deleted = _delete(admin, plan.delete, timeout_s)
    _wait_for(admin, admin_config, plan.delete, present=False, timeout_s=timeout_s)
    return RollResult(template, now, plan, False, tuple(created), tuple(deleted), group, counts)


def group_progress(admin_config: Mapping[str, Any], group: str, topics: Iterable[str], *,
                   timeout_s: float = 10.0) -> dict[str, tuple[PartitionProgress, ...]]:
    """Each topic's partitions: low and high watermark, and ``group``'s committed offset (None: it has none).

    A topic that no longer exists is left out. Reads with a consumer carrying the
    group's id that never subscribes, so it neither joins the group nor commits.
    Raises TopicAdminError if the cluster cannot be reached or refuses a read (an
    unreadable committed offset is an error, never "consumed").
    """
    topics = list(topics)
    consumer = new_consumer({**admin_config, "group.id": group, "enable.auto.commit": False,
                             "allow.auto.create.topics": False})
    try:
        md = consumer.list_topics(timeout=timeout_s).topics
        tps = [TopicPartition(t, p) for t in topics if t in md and md[t].error is None for p in sorted(md[t].partitions)]
        marks = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=timeout_s) for tp in tps}
        committed = consumer.committed(tps, timeout=timeout_s) if tps else []
    except KafkaException as exc:
        raise TopicAdminError(f"reading the progress of group {group!r} on {_where(admin_config)} failed: "
                              f"{_error_text(exc)[1]}") from None
    finally:
        consumer.close()
    out: dict[str, list[PartitionProgress]] = {}
    for tp in committed:
        if tp.error is not None:
            raise TopicAdminError(f"cannot read the committed offset of group {group!r} on {tp.topic!r} "
                                  f"partition {tp.partition}: {tp.error.str()}")
        low, high = marks[(tp.topic, tp.partition)]
        out.setdefault(tp.topic, []).append(
            PartitionProgress(tp.partition, int(low), int(high), tp.offset if tp.offset >= 0 else None))
    return {topic: tuple(parts) for topic, parts in out.items()}


# --- growing topics ------------------------------------------------------------------------


def add_partitions(admin_config: Mapping[str, Any], totals: Mapping[str, int], *,
                   timeout_s: float = 10.0) -> dict[str, int]:
    """Grow each topic of ``totals`` to that many partitions, in one CreatePartitions request.

    Topics are sent in the mapping's order; one already at its total is left alone
    (a grow that stopped half-way can be run again). Waits until metadata shows every
    new count and returns the counts. Raises TopicNotFoundError for a topic that does
    not exist, TopicAdminError for one that has more partitions than asked (Kafka
    cannot remove partitions), a refusal by the cluster, or a timeout; ConfigError for
    a total outside 1..MAX_PARTITIONS.
    """
    for name, total in totals.items():
        require_int(f"partitions of {name!r}", total, 1, MAX_PARTITIONS)
    admin = _admin(admin_config)
    topics = _metadata(admin, admin_config, timeout_s).topics
    grow = []
    for name, total in totals.items():
        info = topics.get(name)
        if info is None or info.error is not None or not info.partitions:
            raise TopicNotFoundError(f"topic {name!r} does not exist on {_where(admin_config)}")
        if len(info.partitions) > total:
            raise TopicAdminError(f"topic {name!r} has {len(info.partitions)} partitions, more than {total}: "
                                  "Kafka cannot remove partitions")
        if len(info.partitions) < total:
            grow.append(NewPartitions(name, total))
    if grow:
        futures = admin.create_partitions(grow, operation_timeout=timeout_s, request_timeout=timeout_s)
        for new in grow:
            err, _ = _result(futures[new.topic], f"adding partitions to {new.topic!r}", timeout_s + 5)
            if err is not None:
                raise TopicAdminError(f"cannot grow topic {new.topic!r} to {new.new_total_count} partitions: "
                                      f"{err.str()}")
    return _wait_for(admin, admin_config, list(totals), present=True, timeout_s=timeout_s, at_least=totals)


# --- the admin client ----------------------------------------------------------------------


def _where(admin_config: Mapping[str, Any]) -> str:
    return str(admin_config.get("bootstrap.servers", "?"))


def _admin(admin_config: Mapping[str, Any]) -> AdminClient:
    try:
        return new_admin(admin_config)
    except (KafkaException, ValueError, TypeError) as exc:
        shown = redact({k: v for k, v in admin_config.items() if k != "logger"})
        raise TopicAdminError(f"invalid Kafka client configuration {shown}: {exc}") from None


def _error_text(exc: BaseException) -> tuple[KafkaError | None, str]:
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(err, KafkaError):
        return err, err.str()
    return None, str(exc) or type(exc).__name__


def _metadata(admin: AdminClient, admin_config: Mapping[str, Any], timeout_s: float) -> ClusterMetadata:
    """All topics' metadata (never one topic's: that request may auto-create it)."""
    try:
        return admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        admin.poll(0)  # hand librdkafka's queued log lines (why it failed) to the configured logger
        err, text = _error_text(exc)
        if err is not None and err.code() in _UNREACHABLE:
            raise TopicAdminError(f"cannot reach the Kafka cluster at {_where(admin_config)} "
                                  f"within {timeout_s:g} s: {text}") from None
        raise TopicAdminError(f"metadata request to {_where(admin_config)} failed: {text}") from None


def _result(future: concurrent.futures.Future[Any], what: str, timeout_s: float) -> tuple[KafkaError | None, Any]:
    """``(None, result)``, or ``(error, None)`` for a KafkaException; raise TopicAdminError on a timeout."""
    try:
        return None, future.result(timeout_s)
    except concurrent.futures.TimeoutError:
        raise TopicAdminError(f"{what}: no answer within {timeout_s:g} s") from None
    except KafkaException as exc:
        err, text = _error_text(exc)
        if err is None:
            raise TopicAdminError(f"{what}: {text}") from None
        return err, None


def _create(admin: AdminClient, specs: Sequence[TopicSpec], timeout_s: float) -> list[str]:
    """Create ``specs``; return the names created now (an existing one is not an error)."""
    if not specs:
        return []
    new = [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.config)) for s in specs]
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    created = []
    for spec in specs:
        err, _ = _result(futures[spec.name], f"creating topic {spec.name!r}", timeout_s + 5)
        if err is None:
            created.append(spec.name)
        elif err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise TopicAdminError(f"cannot create topic {spec.name!r}: {err.str()}")
    return created


def _delete(admin: AdminClient, names: Sequence[str], timeout_s: float) -> list[str]:
    """Delete ``names``; return those deleted now (one already gone is not an error)."""
    if not names:
        return []
    futures = admin.delete_topics(list(names), operation_timeout=timeout_s, request_timeout=timeout_s)
    deleted = []
    for name in names:
        err, _ = _result(futures[name], f"deleting topic {name!r}", timeout_s + 5)
        if err is None:
            deleted.append(name)
        elif err.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise TopicAdminError(f"cannot delete topic {name!r}: {err.str()}")
    return deleted


def _wait_for(admin: AdminClient, admin_config: Mapping[str, Any], names: Sequence[str], *, present: bool,
              timeout_s: float, at_least: Mapping[str, int] | None = None) -> dict[str, int]:
    """Poll metadata until every name is present (with at least ``at_least[name]`` partitions) or absent.

    Returns the partition counts of the present ones.
    """
    deadline = time.monotonic() + timeout_s
    minimum = at_least or {}
    while True:
        topics = _metadata(admin, admin_config, timeout_s).topics
        counts = {n: len(topics[n].partitions) for n in names
                  if n in topics and topics[n].error is None and topics[n].partitions}
        waiting = [n for n in names if (n in counts) != present or counts.get(n, 0) < minimum.get(n, 0)]
        if not waiting:
            return counts
        if time.monotonic() >= deadline:
            state = "appear" if present else "disappear"
            shown = [f"{n} ({counts[n]} of {minimum[n]} partitions)" if n in counts and n in minimum else n
                     for n in waiting]
            raise TopicAdminError(f"topics did not {state} in the metadata of {_where(admin_config)} "
                                  f"within {timeout_s:g} s: {', '.join(shown)}")
        time.sleep(_POLL_S)


def _describe_configs(admin: AdminClient, names: Sequence[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=timeout_s)
    out = {}
    for resource, future in futures.items():
        err, entries = _result(future, f"describing topic {resource.name!r}", timeout_s + 5)
        if err is not None:
            raise TopicAdminError(f"cannot describe topic {resource.name!r}: {err.str()}")
        out[resource.name] = entries
    return out


def _is_topic_override(entry: Any) -> bool:
    """True for a config set on the topic itself (the C layer may hand the source over as an int)."""
    return entry.source in (ConfigSource.DYNAMIC_TOPIC_CONFIG, ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
