"""The Quix Streams worker for bench_worker.py: a one-minute tumbling sum and count per key, final only.

    STREAMS_BOOTSTRAP_SERVERS=... STREAMS_EVENTS=... QUIX_GROUP=... QUIX_OUTPUT=... QUIX_STATE_DIR=... \\
        python bench/apps/quix_app.py

The same job as the streams worker's buckets, in Quix Streams' own idiom:

* reads the events topic (the JSON envelope of RoutingProducer) from the beginning
  in its own consumer group;
* event time is the envelope's ``ts_ms`` (``timestamp_extractor``);
* windows are keyed by the Kafka message key. RoutingProducer keys a record with the
  routing key's canonical bytes, salted ``key#i`` only for a split key; the bench
  splits none, so the message key is the envelope's ``key`` and no ``group_by``
  (a repartition topic, a second pass over every event) is needed;
* grace 5 s, results only for closed windows (``.final()``), closed per partition
  (``closing_strategy="partition"``) as the streams worker's watermark closes a bucket
  for every key at once; Quix's default, ``"key"``, closes a key's window only when
  that key is seen again;
* RocksDB state with its changelog topic (Quix's defaults);
* commits every second (``commit_interval=1.0``, as faust's ``broker_commit_interval``
  in the other rows; Quix's default is 5 s);
* results, ``{"start", "end", "sum", "count"}`` as JSON keyed by the key, to the output topic.
"""

import os
from datetime import timedelta
from typing import Any

from quixstreams import Application
from quixstreams.dataframe.windows import Count, Sum


def event_time(value: Any, headers: Any, timestamp_ms: int, timestamp_type: Any) -> int:
    """The envelope's event time (RoutingProducer also stamps it as the record's timestamp)."""
    return int(value["ts_ms"])


def main() -> None:
    app = Application(
        broker_address=os.environ["STREAMS_BOOTSTRAP_SERVERS"],
        consumer_group=os.environ["QUIX_GROUP"],
        auto_offset_reset="earliest",
        commit_interval=1.0,
        state_dir=os.environ["QUIX_STATE_DIR"],
        loglevel="WARNING",
    )
    events = app.topic(os.environ["STREAMS_EVENTS"], value_deserializer="json", key_deserializer="bytes",
                       timestamp_extractor=event_time)
    output = app.topic(os.environ["QUIX_OUTPUT"], value_serializer="json", key_serializer="bytes")
    sdf = app.dataframe(events)
    sdf = (sdf.tumbling_window(timedelta(minutes=1), grace_ms=timedelta(seconds=5))
           .agg(sum=Sum("value"), count=Count())
           .final(closing_strategy="partition"))
    sdf.to_topic(output)
    app.run()


if __name__ == "__main__":
    main()
