"""Follow compacted control topics in the background; the hot-keys topic keeps a router's key directory current.

:class:`CompactedTopicReader` is the one loop both followers share (this module's
:class:`HotKeyFollower` and :class:`streams.kafka.maps.RoutingMapFollower`): a
background thread reads every partition of the topic from the beginning (it is
compacted, so the beginning is the current state) with no consumer group offsets,
tracks when it has caught up to the end offsets it found at start, waits for a
topic that does not exist yet, and keeps reading with a short poll so a new record
takes effect within about ``poll_timeout_s``.

The hot-keys topic is untrusted input: each record is decoded by its schema header
(:func:`~streams.core.routing.directory.decode_notice`: version 2 placements, or
version 1 split factors from older deciders) and validated; a malformed or hostile
notice (no partition, a partition out of range or repeated, more partitions than
the map has, a key that does not match the record key, an enormous key, a wrong
schema) is rejected and counted, never applied and never fatal. A tombstone (null
value) sends its key home.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from streams.core.config import redact
from streams.core.errors import HotKeyNoticeError, SerializationError
from streams.core.routing.directory import decode_notice, notice_schema
from streams.core.routing.router import Router
from streams.kafka.clients import new_consumer

__all__ = ["CompactedTopicReader", "HotKeyFollower"]

log = logging.getLogger(__name__)


class CompactedTopicReader:
    """Reads every partition of compacted ``topic`` from the beginning in a daemon thread, forever.

    Subclasses handle each record in :meth:`_on_record` (on the reader's thread; it
    must not raise). No consumer group offsets are used or committed. A topic that
    does not exist yet is looked for again every 0.5 s, and reported by
    :attr:`error` meanwhile. ``what`` names the topic's role in errors and the
    thread's name (``"hot-keys"``, ``"routing-maps"``).
    """

    def __init__(self, client_config: Mapping[str, Any], topic: str, *, what: str,
                 poll_timeout_s: float = 0.05) -> None:
        self.topic = topic
        self.what = what
        self.poll_timeout_s = poll_timeout_s
        self._config = {
            **client_config,
            "group.id": f"streams-{what.replace('-', '')}-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "allow.auto.create.topics": False,
            "fetch.wait.max.ms": 50,
        }
        self._stop = threading.Event()
        self._current = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"{what}-{topic}", daemon=True)
        self._error: str | None = None

    def start(self) -> None:
        """Start the background thread."""
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread and close its consumer."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def wait_until_current(self, timeout: float) -> bool:
        """Block until every record present at start has been handled; False on timeout."""
        return self._current.wait(timeout)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate()`` holds after some record was handled; False on timeout."""
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    @property
    def error(self) -> str | None:
        """The error the thread is stuck on talking to Kafka (credentials redacted), or None.

        Cleared once the thread recovers (the topic is assigned, a record arrives), so a
        start-up error, such as the topic not existing yet, does not outlive its cause.
        """
        return self._error

    def _on_record(self, msg: Message) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        try:
            consumer = new_consumer(self._config)
        except KafkaException as exc:
            self._error = f"cannot create the {self.what} consumer {redact(self._config)}: {exc}"
            log.error(self._error)
            return
        try:
            ends = self._assign(consumer)
            while not self._stop.is_set():
                msg = consumer.poll(self.poll_timeout_s)
                if msg is not None:
                    if msg.error() is not None:
                        self._error = str(msg.error())
                        continue
                    self._error = None
                    self._on_record(msg)
                    with self._changed:
                        self._changed.notify_all()
                    if ends is not None and msg.offset() + 1 >= ends.get(msg.partition(), 0):
                        ends.pop(msg.partition(), None)
                if ends is not None and not ends:
                    self._current.set()
                    ends = None
        finally:
            consumer.close()

    def _assign(self, consumer: Consumer) -> dict[int, int] | None:
        """Assign every partition from the beginning; returns the end offsets to catch up to."""
        while not self._stop.is_set():
            try:
                md = consumer.list_topics(self.topic, timeout=5)
                info = md.topics.get(self.topic)
                if info is not None and info.error is None and info.partitions:
                    parts = sorted(info.partitions)
                    consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in parts])
                    ends = {}
                    for p in parts:
                        low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=5)
                        if high > low:
                            ends[p] = high
                    self._error = None
                    return ends
                self._error = f"{self.what} topic {self.topic!r} is not available: {info.error if info else 'no metadata'}"
            except KafkaException as exc:
                self._error = str(exc)
            self._stop.wait(0.5)  # the topic does not exist yet: look again shortly
        return None


class HotKeyFollower(CompactedTopicReader):
    """Applies placement notices from ``topic`` to ``router.directory`` in a daemon thread.

    ``applied`` and ``rejected`` count notices; ``rejections`` counts the rejected
    ones by a short, fixed reason (what the producer's Prometheus metrics export).
    """

    def __init__(self, router: Router, client_config: Mapping[str, Any], topic: str,
                 *, poll_timeout_s: float = 0.05) -> None:
        super().__init__(client_config, topic, what="hot-keys", poll_timeout_s=poll_timeout_s)
        self.router = router
        self.applied = 0
        self.rejected = 0
        self.rejections: dict[str, int] = {}

    def _on_record(self, msg: Message) -> None:
        self._handle(msg.key(), msg.value(), msg.headers())

    def _home(self, key: bytes, partitions: int) -> int:  # noqa: ARG002 - the newest map has that count
        return self.router.home_of(key)

    def _handle(self, key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]] | None) -> None:
        directory = self.router.directory
        reason = "invalid notice"
        try:
            if value is None:  # tombstone: the decider sent this key home
                if not key:
                    reason = "tombstone without key"
                    raise HotKeyNoticeError("tombstone without a key")
                directory.remove(key)
                self.applied += 1
                return
            try:
                notice = decode_notice(value, notice_schema(headers), home=self._home,
                                       partitions=self.router.current.partitions)
            except (SerializationError, HotKeyNoticeError) as exc:
                if isinstance(exc, SerializationError):
                    reason = "undecodable"
                directory.count_rejection()
                raise
            if key is not None and notice.key != key:
                reason = "key mismatch"
                directory.count_rejection()
                raise HotKeyNoticeError("notice key does not match the record key")
            self.router.apply_notice(notice)
            self.applied += 1
            log.debug("placed %r on %s", notice.key_display, list(notice.placement))
        except (SerializationError, HotKeyNoticeError) as exc:
            self.rejected += 1
            self.rejections[reason] = self.rejections.get(reason, 0) + 1
            log.warning("rejected hot-key notice on %s: %s", self.topic, exc)
