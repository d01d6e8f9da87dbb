"""``streams worker``: start a faust worker of :mod:`streams.app`, configured by flags.

The same as ``faust -A streams.app worker -l info --without-web`` with the settings
in ``STREAMS_*`` variables: each flag sets its variable (``--partitions 24`` sets
``STREAMS_PARTITIONS=24``), the settings are validated here, the cluster is checked
once, and then this process *becomes* the faust worker (``os.execve`` of the
``faust`` script next to this Python): signals (Ctrl-C, SIGTERM from a supervisor)
reach faust directly and its exit status is the command's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, get_type_hints

from streams.cli import (
    HelpFormatter,
    add_kafka_arguments,
    duration_s,
    kafka_client_config,
    print_json,
)
from streams.core.config import KafkaSettings, TopicNames, WorkerSettings, load, scrub
from streams.core.errors import StreamsError
from streams.core.time.buckets import TimeBuckets, parse_duration
from streams.kafka.admin import TopicNotFoundError, topic_partitions

NAME = "worker"
APP = "streams.app"
LOGLEVELS = ("crit", "error", "warn", "info", "debug")
_ROLES = tuple(f.name for f in dataclasses.fields(TopicNames))
_SETTINGS = tuple(f.name for f in dataclasses.fields(WorkerSettings))
_DURATIONS = ("allowed_delay", "idle_timeout", "retention")

_EPILOG = """\
examples:
  streams worker
  streams worker --bootstrap-server broker:9092 --partitions 24 --bucket-width 5m --grace 30s --metrics-port 9108
  streams worker --app-id streams-eu --events-topic eu.events -l debug
  streams worker --dry-run --partitions 4          # print the environment and command, start nothing
  streams worker -- --blocking-timeout 5           # anything after -- goes to 'faust worker'

Each setting flag sets the STREAMS_<NAME> variable the app reads (--balance-target is
STREAMS_BALANCE_TARGET); settings not given come from the environment, then from the
TOML file in --config / $STREAMS_CONFIG, then the defaults. Run one worker per
process; start more (anywhere) with the same --app-id to share the partitions.
"""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``worker`` to ``subparsers``."""
    parser = subparsers.add_parser(
        NAME, help="start a faust worker (stage-1 and stage-2 aggregation, hot-key decider)",
        description="Start a faust worker of streams.app: it creates the project's topics if missing, "
                    "aggregates events per (bucket, key), routes late events and dead letters, merges "
                    "partials exactly, and decides hot keys. Runs until Ctrl-C or SIGTERM.",
        epilog=_EPILOG, formatter_class=HelpFormatter)
    add_kafka_arguments(parser)
    parser.add_argument("--config", metavar="FILE", help="TOML settings file (sets $STREAMS_CONFIG)")
    parser.add_argument("--instance", metavar="NAME",
                        help="this worker's name in hot-key sketches ($STREAMS_INSTANCE; default: host-pid-random)")
    parser.add_argument("--tick", type=duration_s, metavar="DURATION",
                        help="how often buckets are closed and sketches published, e.g. 250ms "
                             "($STREAMS_TICK_S in seconds; default: 250ms)")
    settings = parser.add_argument_group("worker settings (WorkerSettings)")
    defaults, hints = WorkerSettings(), get_type_hints(WorkerSettings)
    for name in _SETTINGS:
        settings.add_argument(f"--{name.replace('_', '-')}", dest=f"set_{name}", type=hints[name],
                              metavar=name.rsplit("_", 1)[-1].upper() if hints[name] is str else "N",
                              help=f"${_var(name)} (default: {getattr(defaults, name)})")
    topics = parser.add_argument_group("topic names (TopicNames)")
    for role in _ROLES:
        topics.add_argument(f"--{role.replace('_', '-')}-topic", dest=f"topic_{role}", metavar="NAME",
                            help=f"${_var(role)} (default: {getattr(TopicNames(), role)})")
    faust = parser.add_argument_group("faust")
    faust.add_argument("-l", "--loglevel", choices=LOGLEVELS, default="info", help="log level (default: info)")
    faust.add_argument("-f", "--logfile", metavar="FILE", help="log to this file (default: stderr)")
    faust.add_argument("-D", "--datadir", metavar="DIR", help="faust's data directory (default: <app-id>-data)")
    faust.add_argument("--web-port", type=int, metavar="PORT",
                       help="serve faust's web views on this port (default: no web server)")
    faust.add_argument("--dry-run", action="store_true",
                       help="print the environment and the faust command, start nothing")
    faust.add_argument("--json", action="store_true", help="with --dry-run: print them as JSON")
    faust.add_argument("faust_args", nargs=argparse.REMAINDER, metavar="-- FAUST_ARGS",
                       help="more 'faust worker' options, after --")
    return parser


def _var(name: str) -> str:
    return f"STREAMS_{name.upper()}"


def run(args: argparse.Namespace) -> int:
    """Validate, check the cluster, then exec faust (never returns unless --dry-run).

    Raises ConfigError / InvalidBucketError for a bad setting, StreamsError for an
    unreachable cluster, OSError if faust cannot be started.
    """
    env = environment(args)
    command = faust_command(args)
    if args.dry_run:
        shown = {k: scrub(v) for k, v in env.items()}  # no credential, whatever variable carries it
        if args.json:
            print_json({"env": shown, "command": [scrub(c) for c in command]})
        else:
            print(scrub(" ".join([f"{k}={shlex.quote(v)}" for k, v in shown.items()]
                                 + [shlex.quote(c) for c in command])))
        return 0
    os.environ.update(env)  # what the worker will see: check the cluster with exactly that
    try:
        topic_partitions(kafka_client_config(args), load(TopicNames).events, timeout_s=args.timeout)
    except TopicNotFoundError:
        pass  # the worker creates the project's topics
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)
    return 1  # not reached


def environment(args: argparse.Namespace) -> dict[str, str]:
    """The ``STREAMS_*`` variables the flags set, after checking the settings they make.

    Raises ConfigError or InvalidBucketError naming the first bad setting.
    """
    env: dict[str, str] = {}
    if args.bootstrap_server:
        env[_var("bootstrap_servers")] = args.bootstrap_server
    if args.config:
        env["STREAMS_CONFIG"] = args.config
    if args.instance:
        env["STREAMS_INSTANCE"] = args.instance
    if args.tick is not None:
        env["STREAMS_TICK_S"] = f"{args.tick:g}"
    for name in _SETTINGS:
        value = getattr(args, f"set_{name}")
        if value is not None:
            env[_var(name)] = str(value)
    for role in _ROLES:
        value = getattr(args, f"topic_{role}")
        if value is not None:
            env[_var(role)] = value
    merged = {**os.environ, **env}
    load(KafkaSettings, env=merged)
    load(TopicNames, env=merged)
    settings = load(WorkerSettings, env=merged)
    TimeBuckets(settings.bucket_width, settings.grace)
    for name in _DURATIONS:
        parse_duration(getattr(settings, name), name)
    return env


def faust_command(args: argparse.Namespace) -> list[str]:
    """``[faust, -A, streams.app, worker, ...]``: the faust script of this Python's environment."""
    faust = Path(sys.executable).parent / "faust"
    if not faust.exists():
        found = shutil.which("faust")
        if found is None:
            raise StreamsError(f"cannot find the faust command (not at {faust}, not on PATH): "
                               "install faust-streaming in this environment")
        faust = Path(found)
    command = [str(faust), "-A", APP]
    if args.datadir:
        command += ["--datadir", args.datadir]
    command += ["worker", "--loglevel", args.loglevel]
    if args.logfile:
        command += ["--logfile", args.logfile]
    command += ["--with-web", "--web-port", str(args.web_port)] if args.web_port else ["--without-web"]
    extra: list[Any] = list(args.faust_args)
    if extra[:1] == ["--"]:
        extra = extra[1:]
    return command + [str(a) for a in extra]
