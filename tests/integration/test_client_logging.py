"""librdkafka's log lines go to Python logging, never to stderr, for every client streams.kafka.clients builds.

librdkafka writes ``%3|...|FAIL|...`` straight to file descriptor 2, where no capture
in this process can see it, so each case runs in a child process and the test reads
the child's real stderr. The child waits in a bounded poll loop for the event it
expects (a FAIL record in logging, or the FAIL line in its own stderr file), never for
a fixed time.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streams.kafka.clients import LIBRDKAFKA_LOGGER, with_logger

CLOSED = "127.0.0.1:1"  # nothing listens on port 1: every connection attempt is refused and logged as FAIL
RAW_LINE = re.compile(r"%\d\|\d+\.\d+\|")  # the start of a line librdkafka printed itself

CHILD = r'''
import json, logging, sys, time
mode, kind, bootstrap, stderr_path, topic = sys.argv[1:6]
from streams.kafka import clients

records = []

def record(rec):  # a filter, not a handler: it sees every record and leaves the handler lookup alone
    records.append({"level": rec.levelname, "name": rec.name, "message": rec.getMessage()})
    return True

clients.LIBRDKAFKA_LOGGER.addFilter(record)
clients.LIBRDKAFKA_LOGGER.setLevel(logging.DEBUG)
conf = {"bootstrap.servers": bootstrap}
if mode == "bare":  # the control: confluent-kafka without a logger, as before streams.kafka.clients
    from confluent_kafka import Producer
    client = Producer(conf)
elif kind == "producer":
    client = clients.new_producer({**conf, **({"debug": "broker,topic,msg"} if mode == "live" else {})})
elif kind == "consumer":
    client = clients.new_consumer({**conf, "group.id": "streams-logging-test"})
    client.subscribe(["streams-logging-test"])
else:
    client = clients.new_admin(conf)

def seen():
    if mode == "bare":
        with open(stderr_path, "rb") as err:
            return b"|FAIL|" in err.read()
    if mode == "live":
        return delivered and any(r["level"] == "DEBUG" for r in records)
    return any("FAIL" in r["message"] for r in records)

delivered = []
if mode == "live":
    client.produce(topic, b"v", b"k", on_delivery=lambda err, msg: delivered.append(err is None))
deadline = time.monotonic() + 20
while not seen() and time.monotonic() < deadline:
    client.poll(0.2)
print(json.dumps({"seen": seen(), "delivered": delivered, "records": records}))
'''


def _run_child(tmp_path: Path, mode: str, kind: str, bootstrap: str, topic: str = "-") -> tuple[dict[str, Any], str]:
    """Run CHILD in ``mode`` for a client of ``kind``; its JSON report and its whole stderr."""
    stderr_path = tmp_path / f"{mode}-{kind}.stderr"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with stderr_path.open("wb") as err:
        done = subprocess.run([sys.executable, "-c", CHILD, mode, kind, bootstrap, str(stderr_path), topic],
                              stdout=subprocess.PIPE, stderr=err, env=env, timeout=60)
    stderr = stderr_path.read_text(errors="replace")
    assert done.returncode == 0, stderr
    return json.loads(done.stdout), stderr


def test_without_a_logger_librdkafka_prints_fail_lines_to_stderr(tmp_path: Path) -> None:
    """The control: the stderr check below would see a raw librdkafka line if one were printed."""
    result, stderr = _run_child(tmp_path, "bare", "producer", CLOSED)
    assert result["seen"], "librdkafka never printed its FAIL line within the deadline"
    assert RAW_LINE.search(stderr) and "|FAIL|" in stderr
    assert result["records"] == []


@pytest.mark.parametrize("kind", ["producer", "consumer", "admin"])
def test_a_client_from_clients_py_logs_fail_to_python_logging_and_nothing_to_stderr(
        tmp_path: Path, kind: str) -> None:
    """A refused connection is an ERROR record on streams.kafka.librdkafka; stderr stays silent."""
    result, stderr = _run_child(tmp_path, "quiet", kind, CLOSED)
    assert result["seen"], f"no FAIL record reached logging: {result['records']}"
    fail = next(r for r in result["records"] if "FAIL" in r["message"])
    assert fail["name"] == "streams.kafka.librdkafka"
    assert fail["level"] == "ERROR"
    assert CLOSED in fail["message"]
    # Nothing configured logging in the child, and yet Python's last-resort handler did not
    # print the record either (the logger's NullHandler), nor did librdkafka print its own line.
    assert not RAW_LINE.search(stderr), stderr
    assert "FAIL" not in stderr, stderr


def test_debug_logs_of_a_producer_on_the_live_broker_reach_logging_and_not_stderr(
        tmp_path: Path, kafka_bootstrap: str, make_topic: Callable[..., str]) -> None:
    """With librdkafka's ``debug`` on, its chatter about the real broker lands in logging only."""
    topic = make_topic("logging")
    result, stderr = _run_child(tmp_path, "live", "producer", kafka_bootstrap, topic)
    assert result["delivered"] == [True], "the record was not delivered to the live broker"
    debug = [r for r in result["records"] if r["level"] == "DEBUG"]
    assert debug and all(r["name"] == "streams.kafka.librdkafka" for r in debug)
    assert any(kafka_bootstrap.split(",")[0] in r["message"] for r in debug)
    assert not RAW_LINE.search(stderr), stderr


def test_a_logger_the_caller_configured_wins_over_the_default() -> None:
    """The CLI passes its own logger; with_logger keeps it and copies the mapping."""
    mine = logging.getLogger("streams.test.mine")
    assert with_logger({"bootstrap.servers": CLOSED})["logger"] is LIBRDKAFKA_LOGGER
    assert with_logger({"bootstrap.servers": CLOSED, "logger": mine})["logger"] is mine
    config = {"bootstrap.servers": CLOSED}
    with_logger(config)
    assert config == {"bootstrap.servers": CLOSED}, "with_logger must not change the caller's mapping"
