"""streams: time-bucketed, hot-key-aware partitioning for Apache Kafka.

The core (``ids``, ``buckets``, ``hashing``, ``routing``) is pure Python and imports
nothing from Kafka; the edges (``producer``, ``app``, ``replay``, ``cli``) talk to the
broker through confluent-kafka and faust-streaming.
"""

from streams.errors import StreamsError

__all__ = ["StreamsError", "__version__"]
__version__ = "0.1.0"
