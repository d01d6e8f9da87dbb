#!/usr/bin/env bash
# One-time set-up on a fresh machine, safe to repeat (fast when nothing changed):
# the system tools the tests use, the Kafka broker's jars from Maven Central, and
#
#   scripts/setup.sh        .venv: the package (editable) with its test, docs and plot extras,
#                           each dependency at the newest version it allows: what
#                           `pip install streams-partitioner` gives a user today; and the
#                           compiled hot paths (native/, built with cargo);
#   scripts/setup.sh min    also .venv-min: the same, every dependency pinned to the
#                           minimum pyproject.toml declares (scripts/min_versions.py);
#   scripts/setup.sh bench  also the bench extra in .venv, the benchmark peers' own
#                           environments (.venv-peers/, bench/peers.py) and a JDK
#                           for the Kafka Streams peer (bench/apps/kstreams/).
#
# Nothing a benchmark alone needs goes into .venv if it could move a version there.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
VENV_MIN=${VENV_MIN:-.venv-min}

need() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
  # Debian packages, only when missing. Needs root (as on CI and the dev machines).
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: please install these Debian packages: ${missing[*]}" >&2
    return 1
  fi
  echo "setup: apt-get install ${missing[*]}"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

need java || apt_install openjdk-17-jre-headless
need mvn || apt_install maven
# docker-compose 1.29 validates docker-compose.yml without a Docker engine (a test runs it).
need docker-compose || apt_install docker-compose

stale() { [ ! -f "$1" ] || [ pyproject.toml -nt "$1" ]; }  # stamp older than pyproject.toml?

new_venv() {  # DIR: a virtualenv with a current pip, if there is none
  if [ ! -x "$1/bin/python" ]; then
    "$PYTHON" -m venv "$1"
    "$1/bin/pip" install -q --upgrade pip
  fi
}

new_venv "$VENV"
if stale "$VENV/.streams-installed"; then
  # Quix Streams came with the bench extra until it held confluent-kafka below 2.13
  # here; it lives in .venv-peers/quix now.
  if "$VENV/bin/pip" show -q quixstreams >/dev/null 2>&1; then "$VENV/bin/pip" uninstall -q -y quixstreams; fi
  # eager: an existing .venv moves to the newest versions too, as a fresh install would.
  "$VENV/bin/pip" install -q --upgrade --upgrade-strategy eager -e ".[test,docs,plot]"
  touch "$VENV/.streams-installed"
fi

# The compiled hot paths (native/, Rust through PyO3 and maturin, crates from crates.io) go into
# .venv only: .venv-min runs the whole suite on their Python twins, so both paths are tested.
need cargo || apt_install cargo
if [ ! -f "$VENV/.streams-native-installed" ] || \
   [ -n "$(find native -newer "$VENV/.streams-native-installed" -not -path 'native/target*' -print -quit)" ]; then
  echo "setup: building streams-native (native/, cargo)"
  "$VENV/bin/pip" install -q ./native
  touch "$VENV/.streams-native-installed"
fi

case "${1:-}" in
  min)
    # Made anew when pyproject.toml changes, so no version from an earlier pin stays.
    if stale "$VENV_MIN/.streams-installed"; then
      rm -rf "$VENV_MIN"
      new_venv "$VENV_MIN"
      "$VENV/bin/python" scripts/min_versions.py test docs >"$VENV_MIN/constraints.txt"
      "$VENV_MIN/bin/pip" install -q -c "$VENV_MIN/constraints.txt" -e ".[test,docs]"
      touch "$VENV_MIN/.streams-installed"
    fi
    ;;
  bench)
    # bench_worker.py builds its Kafka Streams peer with Maven, which needs a JDK's javac.
    need javac || apt_install openjdk-17-jdk-headless
    if stale "$VENV/.streams-bench-installed"; then
      "$VENV/bin/pip" install -q -e ".[bench]"
      touch "$VENV/.streams-bench-installed"
    fi
    "$VENV/bin/python" bench/peers.py >/dev/null
    ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [min|bench]" >&2; exit 2 ;;
esac

"$VENV/bin/python" scripts/kafka_local.py fetch >/dev/null
