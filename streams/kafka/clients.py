"""The one place the project builds confluent-kafka clients, so librdkafka logs go to Python ``logging``.

Without a ``logger`` entry in its configuration librdkafka writes its own log lines
(``%4|...|GETPID|...``, ``%3|...|FAIL|...``) straight to the process's stderr, past
any logging set-up. With one (confluent-kafka 2.16 honours it for Producer, Consumer
and AdminClient alike) the lines are queued and handed to that ``logging.Logger``
when the client is polled (``poll``, ``flush``, ``consume``), from the polling thread.

:data:`LIBRDKAFKA_LOGGER` (``streams.kafka.librdkafka``) is the default. It carries a
``NullHandler``, as a library logger should: nothing is printed unless the
application configures logging (e.g. ``logging.basicConfig``; the demo's
``--debug``), and then the records propagate to its handlers. A ``logger`` the
caller put in the configuration (the CLI does) wins.

While a broker is unreachable librdkafka logs every failed connection attempt of
every client (thousands of lines a minute in a worker with several clients).
:data:`LIBRDKAFKA_LOGGER` therefore carries a :class:`RepeatFilter`: one line per
kind (facility and broker) per minute, the next one saying how many were held back,
and a :class:`RoutineRetryFilter`: a warning that librdkafka is retrying a state every
fresh or busy cluster goes through (a coordinator loading its log) is logged at INFO.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

__all__ = ["LIBRDKAFKA_LOGGER", "RepeatFilter", "RoutineRetryFilter", "with_logger", "new_producer", "new_consumer",
           "new_admin"]

# Broker answers librdkafka retries by itself and that pass within seconds: not a problem to warn about.
_ROUTINE = ("Coordinator load in progress", "Coordinator not available", "Not coordinator")


def _librdkafka_args(record: logging.LogRecord) -> tuple[str, str, str] | None:
    """A librdkafka line's (facility, client, text) (confluent-kafka logs ``"%s [%s] %s"``); None for any other."""
    args = record.args
    if isinstance(args, tuple) and len(args) == 3 and all(isinstance(a, str) for a in args):
        return args  # type: ignore[return-value]
    return None


class RepeatFilter(logging.Filter):
    """Lets one librdkafka line of a kind through per ``window_s``; the next one says how many were held back.

    A line's kind is its facility (``FAIL``, ``ERROR``, ...) and the broker it names
    (the text before the first ``": "``), whichever client logged it. Lines that are
    not librdkafka's (``"%s [%s] %s"`` with facility, client, text) pass untouched.
    """

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}  # kind -> (last passed, held back since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        """True to pass ``record`` (see the class docstring)."""
        args = _librdkafka_args(record)
        if args is None:
            return True
        kind = (args[0], args[2].split(": ", 1)[0][:200])
        now = self._clock()
        with self._lock:
            last, held = self._seen.get(kind, (-float("inf"), 0))
            if now - last < self.window_s:
                self._seen[kind] = (last, held + 1)
                return False
            self._seen[kind] = (now, 0)
        if held:
            record.msg = f"{record.getMessage()} ({held} more like it in the last {now - last:.0f} s held back)"
            record.args = ()
        return True


class RoutineRetryFilter(logging.Filter):
    """Lowers to INFO a librdkafka warning that it is retrying a routine broker state.

    A fresh cluster answers ``COORDINATOR_LOAD_IN_PROGRESS`` while the coordinator
    reads its log, and librdkafka says ``...: Coordinator load in progress: retrying``
    at WARNING; the retry succeeds within seconds. Passes every record (only its level
    may change); a retry that never succeeds surfaces as the client's own error.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """True always; a routine retry's level becomes INFO."""
        args = _librdkafka_args(record) if record.levelno == logging.WARNING else None
        if args is not None and args[2].endswith("retrying") and any(routine in args[2] for routine in _ROUTINE):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


#: Where librdkafka's log lines go unless the configuration names another logger.
LIBRDKAFKA_LOGGER = logging.getLogger("streams.kafka.librdkafka")
LIBRDKAFKA_LOGGER.addHandler(logging.NullHandler())
LIBRDKAFKA_LOGGER.addFilter(RoutineRetryFilter())
LIBRDKAFKA_LOGGER.addFilter(RepeatFilter())


def with_logger(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with ``logger`` set to :data:`LIBRDKAFKA_LOGGER` unless it already names one."""
    return {"logger": LIBRDKAFKA_LOGGER, **config}


def new_producer(config: Mapping[str, Any]) -> Producer:
    """A ``confluent_kafka.Producer`` for ``config`` whose librdkafka logs go to Python logging."""
    return Producer(with_logger(config))


def new_consumer(config: Mapping[str, Any]) -> Consumer:
    """A ``confluent_kafka.Consumer`` for ``config`` whose librdkafka logs go to Python logging."""
    return Consumer(with_logger(config))


def new_admin(config: Mapping[str, Any]) -> AdminClient:
    """A ``confluent_kafka.admin.AdminClient`` for ``config`` whose librdkafka logs go to Python logging."""
    return AdminClient(with_logger(config))
