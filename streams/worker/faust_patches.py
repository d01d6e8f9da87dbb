"""A narrow change to how faust-streaming drives its consumer, installed by the worker app.

It replaces one library class in this worker process only and keeps faust's
semantics; it is installed by :func:`install` at import of :mod:`streams.worker.app`,
before faust builds a consumer.

* :func:`cap_fetch_wait`: faust hard-codes aiokafka's ``fetch_max_wait_ms=1500``.

Removed after measurement: a replacement of ``Consumer._drain_messages`` that awaited
each record's callback directly instead of faust's ``wait_first(callback(message),
suspend_flow.wait())`` (four asyncio tasks per record, the largest single item of
faust's per-record cost in a py-spy profile). With it, a rebalance under load (a
worker of two killed, or a resubscription to new bucket topics) left partitions
fetched to their end with nothing handed to the agent in about one run of three of
tests/integration/test_worker_bucket_topics.py and one of four of the two-worker kill
test; with faust's own loop, none in ten runs of the two. Correctness first.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install", "cap_fetch_wait"]

_installed = False


def install() -> None:
    """Install the patch once per process (idempotent)."""
    global _installed
    if not _installed:
        cap_fetch_wait()
        _installed = True


def cap_fetch_wait(max_wait_ms: int = 100) -> None:
    """Cap aiokafka's ``fetch_max_wait_ms`` at ``max_wait_ms``.

    With 1.5 s a partition that had no data when a fetch went out can wait that long
    for its next records, which showed up as 0.5-2 s of consumer lag at a few hundred
    events/s, and hot-key detection inherits every millisecond of it.
    """
    import aiokafka

    original = aiokafka.AIOKafkaConsumer

    class _Consumer(original):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["fetch_max_wait_ms"] = min(kwargs.get("fetch_max_wait_ms", max_wait_ms), max_wait_ms)
            super().__init__(*args, **kwargs)

    # faust's driver builds its consumer as ``aiokafka.AIOKafkaConsumer(...)``; this worker
    # process owns the module, so replacing the class there is the narrowest hook.
    aiokafka.AIOKafkaConsumer = _Consumer  # type: ignore[misc]
