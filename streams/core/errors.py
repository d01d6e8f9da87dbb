"""The one exception hierarchy of the project.

Every error the library raises on purpose derives from :class:`StreamsError`, so a
caller can catch the whole family, or just the one it can act on. Messages name the
offending field and, where there is one, the allowed range.
"""

from __future__ import annotations

__all__ = [
    "StreamsError",
    "ConfigError",
    "InvalidIdError",
    "ClockMovedBackwardsError",
    "IdSpaceExhaustedError",
    "InvalidKeyError",
    "InvalidBucketError",
    "RoutingMapError",
    "SerializationError",
    "HotKeyNoticeError",
    "InvalidArgumentError",
    "DeliveryError",
    "QueueFullError",
    "UndeliveredError",
    "ConsumeError",
    "ClusterUnavailableError",
    "WorkerIdLeaseError",
]


class StreamsError(Exception):
    """Base class of every error this package raises deliberately."""


class ConfigError(StreamsError, ValueError):
    """A configuration value is missing, of the wrong type, or out of range."""


class InvalidIdError(StreamsError, ValueError):
    """A value is not a well-formed event ID (UUIDv7 or Snowflake)."""


class ClockMovedBackwardsError(StreamsError):
    """The wall clock stepped back further than the generator's tolerance.

    ``gap_ms`` holds how far back it moved, in milliseconds.
    """

    def __init__(self, message: str, gap_ms: int) -> None:
        super().__init__(message)
        self.gap_ms = gap_ms


class IdSpaceExhaustedError(StreamsError, OverflowError):
    """An ID layout ran out of room: its timestamp field would overflow."""


class InvalidKeyError(StreamsError, ValueError):
    """A routing key (dimension value) is missing, empty or of an unsupported type."""


class InvalidBucketError(StreamsError, ValueError):
    """A time-bucket width, grace or timestamp is not acceptable."""


class RoutingMapError(StreamsError, ValueError):
    """A routing map is malformed, or disagrees with the topic it routes into.

    ``reason``: a short, fixed text saying why a map was refused as the successor of
    the installed ones (``"version not newer"``, ``"shrink"`` ...: see
    :func:`streams.core.routing.maps.check_successor`), what followers count
    rejections by; None when no such reason applies.
    """

    def __init__(self, *args: object, reason: str | None = None) -> None:
        super().__init__(*args)
        self.reason = reason


class SerializationError(StreamsError, ValueError):
    """A payload could not be encoded or decoded with its schema.

    ``field`` names what was wrong, when that is known: a field of the record
    (``"key"``, ``"ts_ms"``, ``"attributes"`` ...), ``"payload"`` when the bytes as a
    whole are not one record (not JSON, not an object, empty, trailing bytes), or
    ``"content-type"`` when they are a record of the other format than the one they
    were read as; None when no field applies (a schema file missing, say). The
    message names it too.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class HotKeyNoticeError(StreamsError, ValueError):
    """A hot-key notice from the control topic is malformed or hostile."""


class InvalidArgumentError(StreamsError, ValueError, TypeError):
    """An argument to a library function has the wrong type or is out of range.

    Also a ValueError and a TypeError, so callers written against the built-in
    exceptions keep working.
    """


class DeliveryError(StreamsError):
    """Records could not be written to Kafka (the broker refused them or did not acknowledge in time)."""


class QueueFullError(DeliveryError):
    """The producer's local queue stayed full for ``timeout_s`` seconds: the record was not enqueued.

    The broker is not taking records as fast as they are sent (down, unreachable, or
    slower than the sender). Records already queued are unaffected; retry later or
    send slower.
    """

    def __init__(self, message: str, *, timeout_s: float) -> None:
        super().__init__(message)
        self.timeout_s = timeout_s


class UndeliveredError(DeliveryError):
    """Not every record sent was delivered: some failed, or were still in flight when the wait ended.

    The counts are the producer's at that moment: ``sent`` = ``delivered`` + ``failed``
    + ``in_flight``; ``last_error`` is the last delivery failure's reason, or None.
    Of the failed, ``not_persisted`` were certainly not written by the broker (safe to
    resend) and ``possibly_persisted`` may have been (a timeout after sending, a lost
    connection): resend those with their original ``event_id`` and ``ts_ms``, so the
    workers' dedupe counts each event once. ``in_flight`` records are in the same
    unknown state as ``possibly_persisted`` ones.
    """

    def __init__(self, message: str, *, sent: int, delivered: int, failed: int, in_flight: int,
                 last_error: str | None, possibly_persisted: int = 0) -> None:
        super().__init__(message)
        self.possibly_persisted = possibly_persisted
        self.not_persisted = failed - possibly_persisted
        self.sent = sent
        self.delivered = delivered
        self.failed = failed
        self.in_flight = in_flight
        self.last_error = last_error


class ConsumeError(StreamsError):
    """Records or offsets could not be read from Kafka, or not to the end within the timeout."""


class ClusterUnavailableError(StreamsError):
    """The Kafka cluster could not be reached (no broker answered within the timeout).

    Worth retrying later; the message names the bootstrap servers and the timeout.
    """


class WorkerIdLeaseError(StreamsError):
    """No fleet-unique Snowflake worker ID is held: a lease could not be obtained, renewed or confirmed.

    A generator that raises it has stopped minting rather than risk an ID another
    producer may also mint. ``worker_id`` is the ID concerned, or None when none was had.
    """

    def __init__(self, message: str, *, worker_id: int | None = None) -> None:
        super().__init__(message)
        self.worker_id = worker_id
