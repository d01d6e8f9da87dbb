#!/usr/bin/env python3
"""Real Apache Kafka brokers (KRaft, combined broker + controller nodes) on 127.0.0.1.

The broker's jars come from Maven Central through Maven (``scripts/kafka/pom.xml``)
and are cached outside git, in ``$STREAMS_CACHE_DIR`` (default
``~/.cache/streams``). Each start gets two free loopback ports, a fresh log
directory, a formatted KRaft storage, and is stopped with SIGTERM (SIGKILL after a
timeout), so no JVM is left behind. The JVM is also told to die with its parent
(``PR_SET_PDEATHSIG``), so a killed test run cannot orphan it.

Used by the pytest session fixture, the demo, and by hand::

    python scripts/kafka_local.py fetch     # download the jars once
    python scripts/kafka_local.py run       # start, print the bootstrap address, wait for Ctrl-C
    python scripts/kafka_local.py run --nodes 3    # a three-node cluster
    python scripts/kafka_local.py run --sasl       # one secured node; prints the SCRAM user's properties

This is development tooling, not part of the ``streams`` import package.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import os
import secrets
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


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and this process has not handed out before.

    The kernel may give a just-closed ephemeral port out again at once, so two calls in a row
    (a node's client and controller listeners) can return the same port; remembering what was
    handed out keeps them distinct.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask Linux to SIGTERM the JVM when the
    # process that started it dies, however it dies.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id={node_id}
controller.quorum.voters={voters}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name={client_listener}
listener.security.protocol.map={protocol_map}
log.dirs={log_dir}
num.partitions=1
default.replication.factor={replicas}
min.insync.replicas={min_isr}
auto.create.topics.enable=true
delete.topic.enable=true
# Internal topics have as many replicas as the cluster has nodes (at most 3), so
# transactions, consumer groups and share groups work on one node and survive the
# loss of one node of three.
offsets.topic.replication.factor={replicas}
offsets.topic.num.partitions=8
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
# Tests join groups often; do not wait 3 s for more members.
group.initial.rebalance.delay.ms=0
# KIP-848 consumer groups: members heartbeat every second (default 5 s), so a member that joins or
# leaves gets its partitions, or its partitions get a new owner, within about a second.
group.consumer.heartbeat.interval.ms=1000
group.consumer.min.heartbeat.interval.ms=1000
# Compaction runs on a single node too; check often so compacted topics settle fast.
log.cleaner.enable=true
log.cleaner.backoff.ms=1000
log.retention.check.interval.ms=5000
# A SIGKILLed node is fenced (its partitions get new leaders) after 6 s, not 9 s.
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=6000
"""

#: Added for a SASL/SCRAM client listener: clients and the inter-broker link
#: authenticate with SCRAM; the controller listener stays PLAINTEXT (it serves no clients).
SASL_PROPERTIES = """\
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256
listener.name.{listener}.scram-sha-256.sasl.jaas.config=\\
  org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";
listener.name.{listener}.scram-sha-512.sasl.jaas.config=\\
  org.apache.kafka.common.security.scram.ScramLoginModule required username="{user}" password="{password}";
"""

#: Added for TLS on the client listener (SSL or SASL_SSL): PEM files of a test CA made at start.
TLS_PROPERTIES = """\
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
"""

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class TestCA:
    """A throw-away certificate authority and one server certificate for 127.0.0.1 / localhost, as PEM files.

    ``ca`` is what clients trust (``ssl.ca.location``); ``keystore`` holds the
    server's unencrypted PKCS#8 key and its certificate (Kafka's PEM keystore).
    """

    ca: Path
    keystore: Path

    @classmethod
    def create(cls, folder: Path, days: int = 2) -> "TestCA":
        """Make the CA and a server certificate signed by it in ``folder`` with openssl; raise BrokerError if it fails."""
        openssl = shutil.which("openssl")
        if openssl is None:
            raise BrokerError("openssl is needed to make the test CA of a TLS broker (apt-get install openssl)")
        folder.mkdir(parents=True, exist_ok=True)
        ext = folder / "san.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        steps = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", str(days),
             "-subj", "/CN=streams-test-ca"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=localhost"],
            ["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", str(days), "-extfile", str(ext)],
        ]
        for step in steps:
            done = subprocess.run([openssl, *step], cwd=folder, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise BrokerError(f"openssl {step[0]} failed making the test CA:\n{done.stderr[-2000:]}")
        keystore = folder / "server-keystore.pem"
        keystore.write_text((folder / "server.key").read_text() + (folder / "server.pem").read_text())
        return cls(folder / "ca.pem", keystore)


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


@dataclass(frozen=True)
class ScramUser:
    """A SASL/SCRAM user the secured broker knows from the moment it is formatted.

    ``mechanism`` is the one clients use (the broker enables both SCRAM mechanisms and
    stores the user's credentials for both).
    """

    username: str = "alice"
    password: str = field(default_factory=lambda: "pw-" + secrets.token_hex(12), repr=False)
    mechanism: str = "SCRAM-SHA-256"

    def __post_init__(self) -> None:
        if self.mechanism not in SCRAM_MECHANISMS:
            raise BrokerError(f"mechanism must be one of {SCRAM_MECHANISMS}, got {self.mechanism!r}")
        for part in (self.username, self.password):
            if not part or any(c in part for c in ',=[]"\\ '):
                raise BrokerError("SCRAM user names and passwords here must be non-empty and free of ,=[]\" "
                                  "spaces and backslashes (they go into StorageTool's --add-scram)")


@dataclass
class LocalKafka:
    """One broker + controller process. Use as a context manager, or call ``start``/``stop``.

    Alone (the defaults) it is a single-node cluster; :class:`LocalKafkaCluster` makes
    several with ``node_id``, ``voters`` and ``replicas`` set. With ``scram`` set, its
    only client listener is SASL_PLAINTEXT with SCRAM (that user, and an inter-broker
    user), so anonymous clients are refused; with ``tls`` too it is SASL_SSL (SSL
    without ``scram``) with a certificate from a :class:`TestCA` made at start.
    :meth:`client_config` gives a client's librdkafka properties (the user's
    credentials, the CA to trust).

    ``bootstrap`` is ``127.0.0.1:<port>`` once started; ``started_in_s`` is how long
    the broker took from launch until it answered a metadata request.
    """

    version: str = KAFKA_VERSION
    heap: str = "768m"
    workdir: Path | None = None
    port: int = 0
    controller_port: int = 0
    node_id: int = 1
    voters: str = ""
    replicas: int = 1
    min_isr: int = 1
    cluster_id: str = ""
    scram: ScramUser | None = None
    tls: bool = False
    started_in_s: float = 0.0
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _own_workdir: bool = field(default=False, repr=False)
    _broker_user: ScramUser = field(default_factory=lambda: ScramUser("streams-broker"), repr=False)
    _ca: TestCA | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` string of the running broker."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        """The broker's own log (server output and log4j)."""
        assert self.workdir is not None
        return self.workdir / "broker.log"

    def client_config(self) -> dict[str, str]:
        """librdkafka properties a client needs here: bootstrap, and the SCRAM user's credentials if secured."""
        config = {"bootstrap.servers": self.bootstrap}
        if self._protocol != "PLAINTEXT":
            config["security.protocol"] = self._protocol
        if self.scram is not None:
            config.update({"sasl.mechanism": self.scram.mechanism,
                           "sasl.username": self.scram.username, "sasl.password": self.scram.password})
        if self._ca is not None:
            config["ssl.ca.location"] = str(self._ca.ca)
        return config

    @property
    def _protocol(self) -> str:
        """The client listener's security protocol."""
        if self.tls:
            return "SASL_SSL" if self.scram is not None else "SSL"
        return "SASL_PLAINTEXT" if self.scram is not None else "PLAINTEXT"

    def start(self) -> "LocalKafka":
        """Fetch jars if needed, format fresh storage, launch, wait until it serves metadata."""
        began = time.monotonic()
        fmt = self.format_storage()
        _check_format(fmt)
        self.launch()
        try:
            self.wait_ready(began)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def format_storage(self) -> subprocess.Popen[str]:
        """Write the config (ports chosen now if unset) and start formatting the storage; returns the format process.

        The caller waits for it (:func:`_check_format`), so several nodes can format at once.
        """
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="streams-kafka-"))
            self._own_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.controller_port = self.controller_port or free_port()
        self.cluster_id = self.cluster_id or new_cluster_id()
        if self.tls and self._ca is None:
            self._ca = TestCA.create(self.workdir / "tls")
        self._config_file.write_text(self._properties())
        (self.workdir / "log4j2.xml").write_text(LOG4J2_XML.format(log_file=self.log_file))
        scram = []
        for user in (self._broker_user, self.scram) if self.scram is not None else ():
            assert user is not None
            for mechanism in SCRAM_MECHANISMS:
                scram += ["--add-scram", f"{mechanism}=[name={user.username},password={user.password}]"]
        # "=" form: a base64 id may start with "-", which argparse takes for a flag
        return subprocess.Popen([*self._jvm(), "kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}",
                                 "--config", str(self._config_file), *scram],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def launch(self) -> None:
        """Start the JVM on the formatted storage (also after a kill: the data survives)."""
        assert self.workdir is not None
        out = open(self.workdir / "broker.out", "ab")
        # Popen from the thread that keeps running: PR_SET_PDEATHSIG fires when the
        # *thread* that forked the JVM ends, not only the process.
        self._proc = subprocess.Popen([*self._jvm(), "kafka.Kafka", str(self._config_file)], stdout=out,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      preexec_fn=_die_with_parent, start_new_session=True)
        out.close()

    @property
    def _config_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "server.properties"

    def _jvm(self) -> list[str]:
        libs = fetch_jars(self.version)
        java = shutil.which("java")
        if java is None:
            raise BrokerError("java is needed to run the Kafka broker (Java 17 or newer)")
        assert self.workdir is not None
        return [java, f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.xml'}", "-cp", f"{libs}/*"]

    def _properties(self) -> str:
        assert self.workdir is not None
        client = self._protocol
        text = SERVER_PROPERTIES.format(
            node_id=self.node_id, voters=self.voters or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            listeners=f"{client}://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            advertised=f"{client}://127.0.0.1:{self.port}", client_listener=client,
            protocol_map=f"{client}:{client},CONTROLLER:PLAINTEXT", log_dir=self.workdir / "data",
            replicas=self.replicas, min_isr=self.min_isr)
        if self.scram is not None:
            text += SASL_PROPERTIES.format(user=self._broker_user.username, password=self._broker_user.password,
                                           listener=client.lower())
        if self._ca is not None:
            text += TLS_PROPERTIES.format(keystore=self._ca.keystore, ca=self._ca.ca)
        return text

    def wait_ready(self, began: float, *, brokers: int = 1) -> None:
        """Poll until this node answers a metadata request listing ``brokers`` brokers (or fail with BrokerError)."""
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
                    admin = new_admin(self.client_config())
                except OSError:
                    pass
            else:
                try:
                    if len(admin.list_topics(timeout=2).brokers) >= brokers:
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

    def kill(self) -> None:
        """SIGKILL the JVM (a crash: no shutdown, no flush) and wait for it to be gone."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def terminate(self) -> None:
        """Send SIGTERM (a clean shutdown begins); :meth:`wait_or_kill` or :meth:`stop` finishes it."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)

    def wait_or_kill(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the JVM to exit, then SIGKILL it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        """SIGTERM the broker, wait for a clean shutdown, SIGKILL it if that takes too long."""
        self.terminate()
        self.wait_or_kill(STOP_TIMEOUT_S)
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


def new_cluster_id() -> str:
    """A random KRaft cluster id (base64 of a UUID, as ``kafka-storage random-uuid`` prints)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _check_format(fmt: subprocess.Popen[str]) -> None:
    out, _ = fmt.communicate()
    if fmt.returncode != 0:
        raise BrokerError(f"kafka StorageTool format failed:\n{out[-3000:]}")


@dataclass
class LocalKafkaCluster:
    """``nodes`` combined broker + controller nodes on loopback, all of them voters of one KRaft quorum.

    Each node has its own ports, log directory and JVM (``heap`` each). Topics get
    ``min(3, nodes)`` replicas by default and ``min.insync.replicas`` 2 (1 for fewer
    than 3 nodes); so do the offsets and transaction topics. :meth:`kill` SIGKILLs a
    node, :meth:`restart` brings it back on its data, :meth:`leader_of` says which
    node leads a partition. Start from the thread that will also stop it (see
    :meth:`LocalKafka.launch`).
    """

    nodes: int = 3
    version: str = KAFKA_VERSION
    heap: str = "384m"
    started_in_s: float = 0.0
    members: dict[int, LocalKafka] = field(default_factory=dict, repr=False)
    _workdir: Path | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        """``bootstrap.servers`` naming every node."""
        return ",".join(node.bootstrap for node in self.members.values())

    def start(self) -> "LocalKafkaCluster":
        """Format every node's storage in parallel, launch them all, wait until metadata lists every broker."""
        if self.nodes < 1:
            raise BrokerError(f"nodes must be >= 1, got {self.nodes}")
        began = time.monotonic()
        self._workdir = Path(tempfile.mkdtemp(prefix="streams-kafka-cluster-"))
        controller_ports = {i: free_port() for i in range(1, self.nodes + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in controller_ports.items())
        replicas = min(3, self.nodes)
        cluster_id = new_cluster_id()
        self.members = {i: LocalKafka(self.version, self.heap, self._workdir / f"node-{i}", controller_port=p,
                                      node_id=i, voters=voters, replicas=replicas, min_isr=2 if replicas >= 3 else 1,
                                      cluster_id=cluster_id)
                        for i, p in controller_ports.items()}
        try:
            for fmt in [node.format_storage() for node in self.members.values()]:
                _check_format(fmt)
            for node in self.members.values():
                node.launch()
            for node in self.members.values():
                node.wait_ready(began, brokers=self.nodes)
        except BaseException:
            self.stop()
            raise
        self.started_in_s = time.monotonic() - began
        return self

    def node(self, node_id: int) -> LocalKafka:
        """The node with ``node_id`` (1..nodes); raises BrokerError for another id."""
        if node_id not in self.members:
            raise BrokerError(f"no node {node_id}: the cluster has nodes {sorted(self.members)}")
        return self.members[node_id]

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash); the others carry on if a quorum remains."""
        self.node(node_id).kill()

    def restart(self, node_id: int, *, timeout_s: float = START_TIMEOUT_S) -> None:
        """Launch a stopped or killed node on its own data; return once metadata lists every broker again."""
        node = self.node(node_id)
        if node.running:
            raise BrokerError(f"node {node_id} is still running")
        began = time.monotonic()
        node.launch()
        node.wait_ready(began - START_TIMEOUT_S + timeout_s, brokers=self.nodes)

    def leader_of(self, topic: str, partition: int, *, timeout_s: float = 10.0) -> int:
        """The node id leading ``topic``'s ``partition`` now (metadata from a running node); -1 if none."""
        from streams.kafka.clients import new_admin

        running = [n for n in self.members.values() if n.running]
        if not running:
            raise BrokerError("no node of the cluster is running")
        admin = new_admin({"bootstrap.servers": ",".join(n.bootstrap for n in running)})
        # A topic just created reaches each broker's metadata cache a moment later, so a node
        # may still answer UNKNOWN_TOPIC_OR_PART: ask again until the deadline.
        deadline = time.monotonic() + timeout_s
        while True:
            md = admin.list_topics(topic, timeout=max(0.5, deadline - time.monotonic()))
            info = md.topics.get(topic)
            if info is not None and info.error is None and partition in info.partitions:
                return int(info.partitions[partition].leader)
            if time.monotonic() >= deadline:
                raise BrokerError(f"no metadata for {topic}[{partition}] after {timeout_s:.0f} s: "
                                  f"{info.error if info else 'unknown topic'}")
            time.sleep(0.2)

    def stop(self, *, grace_s: float = 3.0) -> None:
        """SIGTERM every node at once, SIGKILL what still runs after ``grace_s``, and delete their data.

        All at once and briefly: the data is thrown away, and nodes shutting down one
        after the other would wait for a quorum that is leaving too.
        """
        running = [n for n in self.members.values() if n.running]
        for node in running:
            node.terminate()
        deadline = time.monotonic() + grace_s
        for node in running:
            node.wait_or_kill(max(0.0, deadline - time.monotonic()))
        if self._workdir is not None and not os.environ.get("STREAMS_KEEP_BROKER_DIR"):
            shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> "LocalKafkaCluster":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """``fetch`` the jars, or ``run`` a broker (``--nodes N`` a cluster, ``--sasl`` secured) until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "run"])
    parser.add_argument("--version", default=KAFKA_VERSION)
    parser.add_argument("--port", type=int, default=0, help="broker port (default: a free one)")
    parser.add_argument("--nodes", type=int, default=1, help="start a cluster of this many nodes (default: 1)")
    parser.add_argument("--sasl", action="store_true",
                        help="one node whose client listener is SASL_PLAINTEXT with SCRAM (prints the user)")
    parser.add_argument("--tls", action="store_true",
                        help="TLS on the client listener with a test CA made now (SASL_SSL with --sasl)")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(fetch_jars(args.version))
        return 0
    if args.nodes > 1 and (args.sasl or args.tls or args.port):
        parser.error("--nodes > 1 takes none of --sasl, --tls, --port")
    kafka: LocalKafka | LocalKafkaCluster
    if args.nodes > 1:
        kafka = LocalKafkaCluster(nodes=args.nodes, version=args.version)
    else:
        kafka = LocalKafka(version=args.version, port=args.port, scram=ScramUser() if args.sasl else None,
                           tls=args.tls)
    with kafka:
        print(f"Kafka {kafka.version} ready at {kafka.bootstrap} in {kafka.started_in_s:.1f} s (Ctrl-C stops it)", flush=True)
        if isinstance(kafka, LocalKafka) and (kafka.scram is not None or kafka.tls):
            print("client properties: " + ", ".join(f"{k}={v}" for k, v in kafka.client_config().items()), flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            while all(n.running for n in (kafka.members.values() if isinstance(kafka, LocalKafkaCluster) else [kafka])):
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
