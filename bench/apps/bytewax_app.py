"""The Bytewax worker for bench_worker.py: a one-minute tumbling sum and count per key, emitted on close.

    STREAMS_BOOTSTRAP_SERVERS=... STREAMS_EVENTS=... BYTEWAX_GROUP=... BYTEWAX_OUTPUT=... \\
        .venv-peers/bytewax/bin/python -m bytewax.run bytewax_app:flow

Runs in its own environment (bench/peers.py, ``peer_python("bytewax")``) and imports
only Bytewax, orjson and the standard library. The same job as the streams worker's
buckets, in Bytewax's own idiom (one worker, one process):

* ``bytewax.connectors.kafka`` reads every partition of the events topic from the
  beginning (RoutingProducer's JSON envelope, parsed once with orjson). Bytewax keeps
  its place in its own recovery store, not in Kafka; so that the bench can time it
  as it times the others (committed offsets), the source's consumers also commit
  what they have read to ``BYTEWAX_GROUP`` every second (librdkafka's auto-commit
  of consumed offsets);
* keyed by the message key (the routing key's text: the bench splits no key);
* ``fold_window`` with an ``EventClock`` on the envelope's ``ts_ms``, waiting 5 s of
  system time for late events (the others' grace), a ``TumblingWindower`` of one
  minute aligned to the epoch, and ``ordered=False`` (each key's events arrive in
  time order, so Bytewax need not buffer them to sort); a window's (count, sum) is
  emitted once, when it closes;
* no recovery store (Bytewax's default): state is in memory only;
* results, ``{"start", "end", "sum", "count"}`` as JSON keyed by the key, to the output topic.
"""

import os
from datetime import datetime, timedelta, timezone

import bytewax.operators as op
import orjson
from bytewax.connectors.kafka import KafkaSinkMessage
from bytewax.connectors.kafka import operators as kop
from bytewax.dataflow import Dataflow
from bytewax.operators.windowing import EventClock, TumblingWindower, fold_window

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
WIDTH = timedelta(minutes=1)
WIDTH_MS = 60_000
BROKERS = [os.environ["STREAMS_BOOTSTRAP_SERVERS"]]
GROUP = os.environ["BYTEWAX_GROUP"]


def event(msg):  # KafkaSourceMessage -> (key, (ts_ms, value))
    envelope = orjson.loads(msg.value)
    return msg.key.decode(), (envelope["ts_ms"], envelope["value"])


def event_time(item) -> datetime:
    return EPOCH + timedelta(milliseconds=item[0])


def fold(acc, item):
    return acc[0] + 1, acc[1] + item[1]


def merge(a, b):
    return a[0] + b[0], a[1] + b[1]


def result(key_window):  # (key, (window id, (count, sum))) -> the output record
    key, (window, (count, total)) = key_window
    start = window * WIDTH_MS  # windows are aligned to the epoch
    body = {"start": start, "end": start + WIDTH_MS, "sum": total, "count": count}
    return KafkaSinkMessage(key.encode(), orjson.dumps(body))


flow = Dataflow("bench_windowed_sums")
source = kop.input("events", flow, brokers=BROKERS, topics=[os.environ["STREAMS_EVENTS"]],
                   add_config={"group.id": GROUP, "enable.auto.commit": "true", "auto.commit.interval.ms": "1000"})
keyed = op.map("parse", source.oks, event)
windows = fold_window("sum_count", keyed, EventClock(event_time, wait_for_system_duration=timedelta(seconds=5)),
                      TumblingWindower(length=WIDTH, align_to=EPOCH), builder=lambda: (0, 0.0), folder=fold,
                      merger=merge, ordered=False)
kop.output("results", op.map("encode", windows.down, result), brokers=BROKERS, topic=os.environ["BYTEWAX_OUTPUT"])
