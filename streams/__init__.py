"""streams: time-bucketed, load-aware partitioning for Apache Kafka.

Layers, each a subpackage, arrows pointing down only (import-linter checks it):

* :mod:`streams.cli`: the ``streams`` command;
* :mod:`streams.worker`: the faust worker (stage 1, stage 2, the app);
* :mod:`streams.kafka`: confluent-kafka edges (``RoutingProducer``, followers, admin,
  monitor, replay);
* :mod:`streams.core`: pure logic, no Kafka client (IDs, buckets, routing, hot keys,
  aggregates, serde, simulation).

The names most users need are importable from here; the Kafka-facing ones are
loaded on first use, so ``import streams`` alone pulls in no Kafka client.
"""

from __future__ import annotations

import importlib
from typing import Any

from streams.core.errors import StreamsError

__all__ = ["RoutingMap", "Router", "RoutingProducer", "StreamsError", "TimeBuckets", "__version__"]
__version__ = "0.1.0"

_LAZY = {
    "RoutingMap": "streams.core.routing.router",
    "Router": "streams.core.routing.router",
    "TimeBuckets": "streams.core.time.buckets",
    "RoutingProducer": "streams.kafka.producer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streams' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
