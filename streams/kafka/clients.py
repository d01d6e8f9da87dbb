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
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

__all__ = ["LIBRDKAFKA_LOGGER", "with_logger", "new_producer", "new_consumer", "new_admin"]

#: Where librdkafka's log lines go unless the configuration names another logger.
LIBRDKAFKA_LOGGER = logging.getLogger("streams.kafka.librdkafka")
LIBRDKAFKA_LOGGER.addHandler(logging.NullHandler())


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
