"""The benchmarks' peers (other stream processors) each live in their own virtualenv.

    from peers import peer_python
    subprocess.Popen([str(peer_python("quix")), "bench/apps/quix_app.py"], ...)

Why: a peer's pins must not move the versions the tests run on. Quix Streams caps
confluent-kafka below 2.13; installed beside the package it held the whole test
environment on confluent-kafka 2.12 while ``pip install streams-partitioner`` gives
users the newest. So the test environment (``.venv``, ``make test``) holds the
package and its ``test``/``docs`` extras only, and every peer gets
``.venv-peers/<name>/``, made on first use from the pinned requirements below and
made again when they change (a stamp file holds the requirements it was made from).
Peers run as subprocesses anyway (bench_worker.py starts each row's worker), so a
peer's app (bench/apps/) imports only its own framework and the standard library,
never ``streams``.

To add a peer: one entry in :data:`PEERS` (exact pins, so a run is repeatable),
its app under bench/apps/, and a row that launches it with ``peer_python(name)``.
``python bench/peers.py NAME...`` makes the named environments ahead of a run
(all of them without a name) and prints their interpreters.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where the peer environments live; ``$STREAMS_PEERS_DIR`` moves them.
PEERS_DIR = Path(os.environ.get("STREAMS_PEERS_DIR", ROOT / ".venv-peers"))

#: peer name -> pinned requirements (pip's syntax), installed into ``.venv-peers/<name>``.
PEERS: dict[str, tuple[str, ...]] = {
    # bench_worker.py's Quix row (bench/apps/quix_app.py): .agg(Sum, Count) needs >= 3.13.
    "quix": ("quixstreams==3.28.1",),
    # bench_worker.py's Bytewax row (bench/apps/bytewax_app.py): its Kafka connector needs confluent-kafka.
    "bytewax": ("bytewax==0.21.1", "confluent-kafka==2.16.2", "orjson==3.13.0"),
}


class PeerError(RuntimeError):
    """A peer that is not in :data:`PEERS`, or whose environment could not be made."""


def peer_python(name: str) -> Path:
    """The Python interpreter of peer ``name``'s environment, made (or remade) first if needed.

    Making one runs ``python -m venv`` and ``pip install`` of the pins (a minute or
    two, from the package registry); later calls only compare the stamp. Raises
    :class:`PeerError` for an unknown name or a failed install (pip's output is
    printed as it runs).
    """
    try:
        requirements = PEERS[name]
    except KeyError:
        raise PeerError(f"unknown benchmark peer {name!r}; known: {', '.join(sorted(PEERS))}") from None
    env = PEERS_DIR / name
    python = env / "bin" / "python"
    stamp = env / ".peer-requirements"
    wanted = "\n".join(requirements) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"peers: making {env} ({' '.join(requirements)})", file=sys.stderr, flush=True)
    base = getattr(sys, "_base_executable", sys.executable)
    try:
        subprocess.run([base, "-m", "venv", "--clear", str(env)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
    except subprocess.CalledProcessError as exc:
        raise PeerError(f"could not make the environment of peer {name!r} in {env}: {exc}") from exc
    stamp.write_text(wanted)
    return python


def main(argv: list[str]) -> int:
    for name in argv or sorted(PEERS):
        print(f"{name}: {peer_python(name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
