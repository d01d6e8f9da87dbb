#!/usr/bin/env python3
"""A real single-node Apache Kafka broker (KRaft, broker + controller) on 127.0.0.1.

The broker's jars come from Maven Central through Maven (``scripts/kafka/pom.xml``)
and are cached outside git, in ``$STREAMS_CACHE_DIR`` (default
``~/.cache/streams``). Each start gets two free loopback ports, a fresh log
directory, a formatted KRaft storage, and is stopped with SIGTERM (SIGKILL after a
timeout), so no JVM is left behind. The JVM is also told to die with its parent
(``PR_SET_PDEATHSIG``), so a killed test run cannot orphan it.

Used by the pytest session fixture, the demo, and by hand::

    python scripts/kafka_local.py fetch     # download the jars once
    python scripts/kafka_local.py run       # start, print the bootstrap address, wait for Ctrl-C

This is development tooling, not part of the ``streams`` import package.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


class BrokerError(RuntimeError):
    """The local broker could not be fetched, started or stopped."""


def cache_dir() -> Path:
    """Where fetched jars live: ``$STREAMS_CACHE_DIR`` or ``~/.cache/streams``."""
    return Path(os.environ.get("STREAMS_CACHE_DIR", Path.home() / ".cache" / "streams"))


def fetch_jars(version: str = KAFKA_VERSION) -> Path:
    """Return the folder of the broker's runtime jars, fetching them with Maven once.

    A ``.complete`` marker is written only after Maven succeeded, so an interrupted
    fetch is retried instead of starting a broker with half its classpath.
    """
    libs = cache_dir() / f"kafka-{version}" / "libs"
    if (libs / ".complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven (mvn) is needed to fetch the Kafka broker jars; install it (apt-get install maven)")
    if libs.exists():
        shutil.rmtree(libs)
    libs.mkdir(parents=True)
    cmd = [
        mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
        "-DincludeScope=runtime", f"-Dkafka.version={version}", f"-DoutputDirectory={libs}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise BrokerError(f"fetching Kafka {version} jars with Maven failed:\n{result.stdout[-4000:]}{result.stderr[-4000:]}")
    if not any(libs.glob(f"kafka_2.13-{version}.jar")):
        raise BrokerError(f"Maven finished but kafka_2.13-{version}.jar is not in {libs}")
    (libs / ".complete").write_text(version)
    return libs


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask Linux to SIGTERM the JVM when the
    # process that started it dies, however it dies.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={log_dir}
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=true
delete.topic.enable=true
# Single node: every internal topic has one replica, so transactions, consumer
# groups and share groups work.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests join groups often; do not wait 3 s for more members.
group.initial.rebalance.delay.ms=0
# Compaction runs on a single node too; check often so compacted topics settle fast.
log.cleaner.enable=true
log.cleaner.backoff.ms=1000
log.retention.check.interval.ms=5000
"""

LOG4J2_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="{log_file}"><PatternLayout pattern="[%d] %p %m (%c)%n"/></File>
  </Appenders>
  <Loggers>
    <Logger name="kafka" level="INFO"/>
    <Logger name="org.apache.kafka" level="INFO"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Root level="WARN"><AppenderRef ref="file"/></Root>
  </Loggers>
</Configuration>
"""


@dataclass
class LocalKafka:
    """One broker process. Use as a context manager, or call ``start``/``stop``.

    ``bootstrap`` is ``127.0.0.1:<port>`` once started; ``started_in_s`` is how long
    the broker took from launch until it answered a metadata request.
    """

    version: str = KAFKA_VERSION
    heap: str = "768m"
    workdir: Path | None = None
    port: int = 0
    controller_port: int = 0
    started_in_s: float = 0.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _own_workdir: bool = field(default=False, repr=False)

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` string of the running broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        """The broker's own log (server output and log4j)."""
        assert self.workdir is not None
        return self.workdir / "broker.log"

    def start(self) -> "LocalKafka":
        """Fetch jars if needed, format fresh storage, launch, wait until it serves metadata."""
        libs = fetch_jars(self.version)
        java = shutil.which("java")
        if java is None:
            raise BrokerError("java is needed to run the Kafka broker (Java 17 or newer)")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="streams-kafka-"))
            self._own_workdir = True
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        log_dir = self.workdir / "data"
        config = self.workdir / "server.properties"
        config.write_text(SERVER_PROPERTIES.format(port=self.port, controller_port=self.controller_port, log_dir=log_dir))
        log4j = self.workdir / "log4j2.xml"
        log4j.write_text(LOG4J2_XML.format(log_file=self.log_file))
        classpath = f"{libs}/*"
        jvm = [java, f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
               "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath]
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        began = time.monotonic()
        fmt = subprocess.run([*jvm, "kafka.tools.StorageTool", "format",
                              # "=" form: a base64 id may start with "-", which argparse takes for a flag
                              f"--cluster-id={cluster_id}", "--config", str(config)],
                             capture_output=True, text=True)
        if fmt.returncode != 0:
            raise BrokerError(f"kafka StorageTool format failed:\n{fmt.stdout[-3000:]}{fmt.stderr[-3000:]}")
        out = open(self.workdir / "broker.out", "wb")
        self._proc = subprocess.Popen([*jvm, "kafka.Kafka", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, start_new_session=True)
        out.close()
        try:
            self._wait_ready(began)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def _wait_ready(self, began: float) -> None:
        from streams.kafka.clients import new_admin

        admin = None
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise BrokerError(f"the Kafka broker exited with status {self._proc.returncode}; "
                                  f"see {self.workdir}/broker.out:\n{self._tail()}")
            if time.monotonic() - began > START_TIMEOUT_S:
                raise BrokerError(f"the Kafka broker did not answer within {START_TIMEOUT_S:.0f} s:\n{self._tail()}")
            if admin is None:
                # Until the port accepts connections, probe with a plain socket so that
                # librdkafka does not log a refused connection every 50 ms.
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                    admin = new_admin({"bootstrap.servers": self.bootstrap})
                except OSError:
                    pass
            else:
                try:
                    if admin.list_topics(timeout=2).brokers:
                        return
                except Exception:  # noqa: BLE001 - KafkaException until metadata is served
                    pass
            time.sleep(0.1)  # polling interval while the JVM boots, not a synchronisation stand-in

    def _tail(self) -> str:
        assert self.workdir is not None
        texts = []
        for name in ("broker.out", "broker.log"):
            p = self.workdir / name
            if p.exists():
                texts.append(p.read_text(errors="replace")[-3000:])
        return "\n".join(texts)

    def stop(self) -> None:
        """SIGTERM the broker, wait for a clean shutdown, SIGKILL it if that takes too long."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self._own_workdir and self.workdir is not None and not os.environ.get("STREAMS_KEEP_BROKER_DIR"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The JVM's process id, while it runs."""
        return self._proc.pid if self._proc is not None else None

    def __enter__(self) -> "LocalKafka":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``fetch`` the jars, or ``run`` a broker in the foreground until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "run"])
    parser.add_argument("--version", default=KAFKA_VERSION)
    parser.add_argument("--port", type=int, default=0, help="broker port (default: a free one)")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(fetch_jars(args.version))
        return 0
    with LocalKafka(version=args.version, port=args.port) as kafka:
        print(f"Kafka {kafka.version} ready at {kafka.bootstrap} in {kafka.started_in_s:.1f} s (Ctrl-C stops it)", flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while kafka.running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
