"""The baseline worker for bench_worker.py: a faust agent that decodes each event and counts it.

Same topic, same faust settings as streams.app, none of its work (no watermark, no
buckets, no sketch, no state), so the ratio shows what the roller and state cost.
"""

import os

import faust
import orjson

app = faust.App(os.environ["STREAMS_APP_ID"], broker="kafka://" + os.environ["STREAMS_BOOTSTRAP_SERVERS"],
                store="memory://", web_enabled=False, broker_commit_interval=1.0,
                consumer_auto_offset_reset="earliest", topic_replication_factor=1)
events = app.topic(os.environ["STREAMS_EVENTS"], key_serializer="raw", value_serializer="raw")
seen = 0


@app.agent(events)
async def count(stream):  # type: ignore[no-untyped-def]
    global seen
    async for value in stream:
        orjson.loads(value)
        seen += 1
