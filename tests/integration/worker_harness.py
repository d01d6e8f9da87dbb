"""Shared integration-test helpers: run the faust worker as a real subprocess, read topics back."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from streams.core.config import TopicNames
from streams.core.serde import AvroCodec

FAUST = str(Path(sys.executable).parent / "faust")


@dataclass
class Worker:
    """A running worker: its environment, topic names and log file."""

    env: dict[str, str]
    names: TopicNames
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    def start(self) -> None:
        # In the test's folder: faust keeps its data folder (<app_id>-data) in the working directory.
        self.proc = subprocess.Popen([FAUST, "-A", "streams.app", "worker", "-l", "info", "--without-web"],
                                     env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
                                     cwd=self.log.parent)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final commit (a crash)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def worker_env(bootstrap: str, *, bucket_topics: bool = False, **settings: Any) -> tuple[dict[str, str], TopicNames]:
    """The environment of a worker on fresh topics ``t<tag>.<role>``; ``bucket_topics``: events ``t<tag>.events.{bucket}``."""
    tag = uuid.uuid4().hex[:8]
    names = TopicNames(**{f: f"t{tag}.{getattr(TopicNames(), f).split('.', 1)[1]}" for f in TopicNames.__dataclass_fields__})
    if bucket_topics:
        names = dataclasses.replace(names, events=names.events + ".{bucket}")
    env = dict(os.environ, STREAMS_BOOTSTRAP_SERVERS=bootstrap, STREAMS_APP_ID=f"worker-{tag}",
               STREAMS_INSTANCE=f"w-{tag}", PYTHONUNBUFFERED="1")
    for name in TopicNames.__dataclass_fields__:
        env[f"STREAMS_{name.upper()}"] = getattr(names, name)
    for key, value in settings.items():
        env[f"STREAMS_{key.upper()}"] = str(value)
    return env, names


@contextmanager
def running_worker(bootstrap: str, tmp_path: Path, *, bucket_topics: bool = False, **settings: Any) -> Iterator[Worker]:
    env, names = worker_env(bootstrap, bucket_topics=bucket_topics, **settings)
    worker = Worker(env, names, tmp_path / f"worker-{env['STREAMS_APP_ID']}.log")
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def consume_all(bootstrap: str, topic: str, expected: int, deadline_s: float = 90) -> list[Any]:
    """Every record of ``topic`` from the beginning, until ``expected`` arrived or the deadline;
    then one more fetch, so duplicates beyond ``expected`` would show."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chk-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[Any] = []
    end = time.monotonic() + deadline_s
    try:
        while len(got) < expected and time.monotonic() < end:
            got.extend(m for m in consumer.consume(5000, 0.5) if m.error() is None)
        got.extend(m for m in consumer.consume(5000, 1.0) if m.error() is None)
    finally:
        consumer.close()
    return got


class TopicReader:
    """Reads a topic from the beginning with a plain consumer (no group), decoding Avro."""

    def __init__(self, bootstrap: str, topic: str, schema: str | None) -> None:
        self.topic = topic
        self.bootstrap = bootstrap
        self.codec = AvroCodec(schema) if schema else None
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic])
        self.records: list[tuple[bytes | None, Any]] = []

    def poll(self, timeout: float = 0.3) -> int:
        got = 0
        for msg in self.consumer.consume(5000, timeout):
            if msg.error() is not None:
                continue
            value = msg.value()
            self.records.append((msg.key(), self.codec.decode(value) if (self.codec and value is not None) else value))
            got += 1
        return got

    def until(self, predicate: Callable[[list[tuple[bytes | None, Any]]], bool], timeout: float,
              worker: Worker | None = None) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.poll()
            if predicate(self.records):
                return True
            if worker is not None and not worker.alive():
                raise AssertionError("the worker died:\n" + worker.tail())
        return predicate(self.records)

    def close(self) -> None:
        self.consumer.close()
