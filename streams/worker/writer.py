"""KafkaWriter: the worker's librdkafka producer for outputs and changelogs, with flush-or-raise.

Every record a worker stage writes (late events, dead letters, partials, aggregates,
changelog entries, sketch summaries) goes through one :class:`KafkaWriter` of that
stage: faust's own producer path costs about ten times more per record in Python.
A stage acknowledges its input only after :meth:`KafkaWriter.flush` returned, so a
committed offset never runs ahead of what reached the broker. Each stage has its own
writer (stage 1 runs in its own thread), so one stage's flush never waits for the
other's records and a failed write is reported to the stage that made it.

A broker outage is waited out: :meth:`KafkaWriter.flush` waits up to ``outage_s``
(5 minutes by default) for the acknowledgements, logging one line when the wait
begins to look like an outage and one when the cluster answers again, and only then
gives up with one DeliveryError. librdkafka keeps retrying the records meanwhile
(``message.timeout.ms`` is set past ``outage_s``), and the idempotent producer
writes each once, so the input is acknowledged later, never twice or never.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from streams.core.errors import DeliveryError
from streams.kafka.clients import new_producer

__all__ = ["KafkaWriter", "WRITER_CONFIG", "DEFAULT_OUTAGE_S"]

log = logging.getLogger(__name__)

#: What a worker writer sets on top of the client configuration.
WRITER_CONFIG: dict[str, Any] = {"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                 "compression.type": "lz4"}

#: How long a write to a partition librdkafka does not know yet keeps refreshing metadata.
UNKNOWN_PARTITION_WAIT_S = 30.0
#: How long a flush waits for an unreachable cluster before the worker gives up.
DEFAULT_OUTAGE_S = 300.0
#: A flush still waiting after this long is logged as a wait for the cluster.
_SLOW_FLUSH_S = 5.0


class KafkaWriter:
    """An idempotent librdkafka producer, created on first use (never at import).

    ``name`` says whose writes these are in its log lines; ``outage_s`` is how long
    :meth:`flush` waits for an unreachable cluster.
    """

    def __init__(self, client_config: Mapping[str, Any], *, name: str = "worker",
                 outage_s: float = DEFAULT_OUTAGE_S) -> None:
        self.name = name
        self.outage_s = outage_s
        self._config = {**client_config, **WRITER_CONFIG, "message.timeout.ms": int((outage_s + 60) * 1000)}
        self._producer: Producer | None = None
        self._errors: list[str] = []
        self._waiting_since: float | None = None  # a flush is waiting for an unreachable cluster since then

    @property
    def reachable(self) -> bool:
        """False while a flush waits for a cluster that does not acknowledge."""
        return self._waiting_since is None

    @property
    def producer(self) -> Producer:
        """The underlying producer (created now if it was not yet)."""
        if self._producer is None:
            self._producer = new_producer(self._config)
        return self._producer

    def _on_delivery(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))

    def write(self, topic: str, key: bytes, value: bytes | None, partition: int | None = None,
              headers: list[tuple[str, bytes]] | None = None) -> None:
        """Queue one record; ``partition`` None lets librdkafka's partitioner choose by key.

        A full local queue is drained by serving delivery reports. A partition that
        ``streams topics grow`` added but librdkafka's cached metadata does not show yet
        is waited for (metadata refreshed) up to ``UNKNOWN_PARTITION_WAIT_S``, then
        DeliveryError. Delivery failures surface at the next :meth:`flush`.
        """
        producer = self.producer
        unknown_until = None
        while True:
            try:
                if partition is None:
                    producer.produce(topic, value, key, on_delivery=self._on_delivery, headers=headers)
                else:
                    producer.produce(topic, value, key, partition=partition, on_delivery=self._on_delivery,
                                     headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                    raise
                unknown_until = unknown_until or time.monotonic() + UNKNOWN_PARTITION_WAIT_S
                if time.monotonic() > unknown_until:
                    raise DeliveryError(f"topic {topic!r} has no partition {partition} after "
                                        f"{UNKNOWN_PARTITION_WAIT_S:.0f} s of metadata refreshes") from None
                producer.list_topics(topic, timeout=5)
        producer.poll(0)

    def flush(self, timeout_s: float | None = None) -> None:
        """Return once the broker acknowledged every record written so far; DeliveryError if any failed.

        Waits up to ``timeout_s`` (default ``outage_s``) for a cluster that does not
        answer, logging the wait once when it passes a few seconds and once when it ends.
        """
        producer = self.producer
        limit = self.outage_s if timeout_s is None else timeout_s
        began = time.monotonic()
        remaining = producer.flush(min(limit, _SLOW_FLUSH_S))
        while remaining and not self._errors and time.monotonic() - began < limit:
            if self._waiting_since is None:
                self._waiting_since = began
                log.warning("%s: Kafka does not acknowledge %d record(s) for %.0f s: waiting up to %.0f s for the "
                            "cluster (nothing is acknowledged meanwhile)", self.name, remaining, _SLOW_FLUSH_S, limit)
            remaining = producer.flush(min(5.0, max(0.0, limit - (time.monotonic() - began))))
        if self._waiting_since is not None and not remaining and not self._errors:
            log.warning("%s: Kafka acknowledges again, after %.0f s", self.name, time.monotonic() - self._waiting_since)
            self._waiting_since = None
        if remaining or self._errors:
            waited = f"after {limit:.0f} s" + (" (broker_outage_timeout)" if timeout_s is None else "")
            error = self._errors[0] if self._errors else f"{remaining} records unacknowledged {waited}"
            del self._errors[:]
            raise DeliveryError(f"the worker could not write to Kafka ({error}): stopping before acknowledging input")

    def flush_soon(self, timeout_s: float) -> None:
        """Push what is queued now (for latency-critical records); failures surface at the next :meth:`flush`."""
        self.producer.flush(timeout_s)
