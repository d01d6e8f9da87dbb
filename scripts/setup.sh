#!/usr/bin/env bash
# One-time set-up on a fresh machine, safe to repeat (fast when nothing changed):
# a virtualenv with the package and its extras, the system tools the tests use,
# and the Kafka broker's jars from Maven Central.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

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

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
fi
stamp="$VENV/.streams-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  "$VENV/bin/pip" install -q -e ".[test,bench,docs]"
  touch "$stamp"
fi

"$VENV/bin/python" scripts/kafka_local.py fetch >/dev/null
