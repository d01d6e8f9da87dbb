"""A minimal faust app for the smoke test: forward every record of SRC to DST."""

import os

import faust

app = faust.App(
    os.environ["APP_ID"],
    broker="kafka://" + os.environ["KAFKA_BOOTSTRAP"],
    store="memory://",
    web_enabled=False,
    topic_replication_factor=1,
)
source = app.topic(os.environ["SRC"], key_serializer="raw", value_serializer="raw")
sink = app.topic(os.environ["DST"], key_serializer="raw", value_serializer="raw")


@app.agent(source)
async def forward(stream):  # type: ignore[no-untyped-def]
    async for event in stream.events():
        await sink.send(key=event.key, value=event.value)
