"""The ``streams`` command: one argparse parser, one module per subcommand.

A subcommand is a module listed in :data:`COMMANDS` that defines

* ``NAME``: the subcommand's name (``"inspect-id"``),
* ``add_parser(subparsers) -> argparse.ArgumentParser``: adds its parser,
* ``run(args) -> int``: does the work and returns the exit status.

:func:`main` imports the modules, builds the parser, and dispatches on ``NAME``.
It owns error handling, so a command simply raises:

* exit 0: success; 130: interrupted (Ctrl-C);
* exit 2: a usage error argparse detects (unknown flag, a value of the wrong type),
  printed by argparse as usage plus ``streams: error: ...``, as every argparse tool does;
* exit 1: anything else - a :class:`~streams.core.errors.StreamsError` (bad ID, bad
  setting, missing topic, unreachable broker ...), a ``KafkaException``, an
  ``OSError`` - as ONE line ``streams: error: <what>`` on stderr. ``--debug``
  (before or after the subcommand) prints the traceback first and shows
  librdkafka's own warnings.

Credentials never reach the terminal: every credential value known from the
settings (or from ``$STREAMS_KAFKA_*`` secret variables) is scrubbed from error
lines, tracebacks and log records (:func:`streams.core.config.scrub`,
:func:`~streams.core.config.install_log_redaction`), whatever shape carried it.

The helpers below are shared by the command modules: Kafka connection flags
(:func:`add_kafka_arguments`, :func:`kafka_client_config`, credentials never
printed), ``--json`` output (:func:`print_json`), and reports that are rich tables
on a terminal and plain aligned text otherwise (:func:`print_table`,
:func:`print_fields`).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException

from streams import __version__
from streams.core.config import (
    KafkaSettings,
    Resolved,
    install_log_redaction,
    is_secret,
    load,
    remember_secrets,
    resolve,
    scrub,
)
from streams.core.errors import ConfigError, StreamsError
from streams.core.validate import require_duration, require_int

__all__ = [
    "COMMANDS",
    "HelpFormatter",
    "add_kafka_arguments",
    "build_parser",
    "describe_error",
    "duration_ms",
    "duration_s",
    "kafka_client_config",
    "kafka_resolved",
    "kafka_settings",
    "main",
    "non_negative_float",
    "positive_int",
    "print_fields",
    "print_json",
    "print_table",
    "stdout_is_tty",
]

# ----------------------------------------------------------------------------------------
# The subcommand registry: add one module path per command (see the module docstring).
COMMANDS: list[str] = [
    "streams.cli.produce",
    "streams.cli.simulate",
    "streams.cli.inspect_id",
    "streams.cli.topics",
    "streams.cli.worker",
    "streams.cli.monitor",
    "streams.cli.replay",
    "streams.cli.tail",
]
# ----------------------------------------------------------------------------------------

PROG = "streams"
DEFAULT_TIMEOUT_S = 10.0
CONFIG_HELP = "TOML settings file (sets $STREAMS_CONFIG); settings: defaults < file < $STREAMS_<NAME> < flags"

_EPILOG = """\
examples:
  streams inspect-id 017F22E2-79B0-7CC3-98C4-DC0C0C07398F
  streams simulate --distribution zipf --keys 1000 --events 100000 --partitions 12
  streams topics create --partitions 12
  streams produce --topic streams.events --count 100000 --rate 5000 --distribution tenants
  streams --debug produce --bootstrap-server broker:9092 --duration 30s

Settings come from, later winning: their defaults, the TOML file named by --config
or $STREAMS_CONFIG, STREAMS_<NAME> variables, then flags. A setting has one name
everywhere: bucket_width is [worker] bucket_width, STREAMS_BUCKET_WIDTH and
--bucket-width. Boolean flags take true/false, yes/no, 1/0, on/off, or --no-<name>.

Every command takes --help. Exit status: 0 success, 1 error (one line on stderr),
2 usage error, 130 interrupted.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``streams`` command line with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    remember_secrets({var: value for var, value in os.environ.items()
                      if var.startswith("STREAMS_KAFKA_") and is_secret(var.replace("_", "."))})
    install_log_redaction()
    _PROBLEMS.last = None  # a reason seen by an earlier main() in this process is not this run's
    parser, registry = build_parser()
    args = parser.parse_args(argv)
    debug = bool(getattr(args, "debug", False))
    if getattr(args, "config", None):
        os.environ["STREAMS_CONFIG"] = args.config  # every command, and a worker it starts, reads this file
    try:
        return int(registry[args.command].run(args))
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``streams simulate | head``): nothing left to tell it.
        _silence_stdout()
        return 1
    except (StreamsError, KafkaException, OSError) as exc:
        return _fail(describe_error(exc) + _connection_hint(exc), debug)
    except Exception as exc:  # noqa: BLE001 - a bug: still one line, traceback with --debug
        hint = "" if debug else " (run with --debug for the traceback)"
        return _fail(f"unexpected {type(exc).__name__}: {describe_error(exc)}{hint}", debug)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType]]:
    """The top-level parser and the registry ``NAME -> module`` of every command in COMMANDS."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Time-bucketed, hot-key-aware partitioning for Apache Kafka.",
        epilog=_EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks and librdkafka warnings")
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    registry: dict[str, ModuleType] = {}
    for path in COMMANDS:
        module = importlib.import_module(path)
        module.add_parser(subparsers)
        registry[module.NAME] = module
    for sub in _all_subparsers(subparsers):
        if not any("--debug" in action.option_strings for action in sub._actions):
            # SUPPRESS: an absent flag leaves the top-level value alone.
            sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if not any("--config" in action.option_strings for action in sub._actions):
            sub.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=CONFIG_HELP)
    return parser, registry


def _all_subparsers(subparsers: argparse._SubParsersAction) -> list[argparse.ArgumentParser]:
    """Every parser under ``subparsers``, nested ones too (``topics create``)."""
    found = []
    for sub in dict.fromkeys(subparsers.choices.values()):
        found.append(sub)
        for action in sub._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.extend(_all_subparsers(action))
    return found


def _fail(message: str, debug: bool) -> int:
    if debug:
        print(scrub(traceback.format_exc()), file=sys.stderr, end="")
    print(f"{PROG}: error: {scrub(message)}", file=sys.stderr)
    return 1


def _silence_stdout() -> None:
    try:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep the interpreter's final flush quiet
    except OSError:
        pass


class _ConnectionProblems(logging.Handler):
    """Remembers the last librdkafka line that says why a connection failed (authentication, TLS)."""

    MARKERS = ("SASL authentication error", "Authentication failed", "SSL handshake failed", "certificate verify")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        found = [message.find(marker) for marker in self.MARKERS if marker in message]
        if found:
            self.last = message[min(found):]  # from the reason on, without thread and broker prefixes


_PROBLEMS = _ConnectionProblems()


def _connection_hint(exc: BaseException) -> str:
    """For a cluster that could not be reached: why, as far as librdkafka said, or what to check."""
    text = str(exc)
    if "cannot reach the Kafka cluster" not in text and "transport failure" not in text.lower():
        return ""
    if _PROBLEMS.last is not None:
        return f" (the broker refused the connection: {_PROBLEMS.last})"
    try:
        protocol = str(load(KafkaSettings).client_properties.get("security.protocol", "PLAINTEXT")).upper()
    except StreamsError:
        return ""
    if protocol == "PLAINTEXT":
        return (" (if the cluster requires authentication or TLS, set security.protocol and the sasl.* / ssl.* "
                "client properties, e.g. $STREAMS_KAFKA_SECURITY_PROTOCOL)")
    return (f" (security.protocol is {protocol}: check the sasl.* / ssl.* client properties; "
            "--debug shows librdkafka's reasons)")


def describe_error(exc: BaseException) -> str:
    """One line saying what went wrong: Kafka errors by their text and code, OSErrors with the file."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err = exc.args[0]
        text = f"Kafka: {err.str()} ({err.name()})"
    elif isinstance(exc, OSError) and exc.strerror and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


class HelpFormatter(argparse.HelpFormatter):
    """Wraps one-paragraph descriptions; keeps text with line breaks (examples) as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if "\n" in text:
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


# --- argument types -----------------------------------------------------------------------


def positive_int(text: str) -> int:
    """argparse type: an int >= 1; raises ArgumentTypeError otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    try:
        return require_int("the value", value, 1)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0; raises ArgumentTypeError otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def duration_ms(text: str) -> int:
    """argparse type: a duration like ``500ms``, ``30s``, ``5m``, ``1h``, ``7d``, in ms.

    The grammar of the settings and the worker,
    :func:`streams.core.validate.require_duration`: a bare number such as ``90`` is
    refused (seconds or milliseconds?). Raises ArgumentTypeError otherwise.
    """
    try:
        return require_duration("duration", text.strip())
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_s(text: str) -> float:
    """argparse type: :func:`duration_ms` in seconds, > 0; raises ArgumentTypeError otherwise."""
    ms = duration_ms(text)
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return ms / 1000


# --- Kafka connection -----------------------------------------------------------------------


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--bootstrap-server`` and ``--timeout`` to a command that talks to the cluster."""
    group = parser.add_argument_group("cluster")
    group.add_argument("--bootstrap-servers", "--bootstrap-server", dest="bootstrap_server", metavar="HOST:PORT",
                       help="Kafka bootstrap servers (default: $STREAMS_BOOTSTRAP_SERVERS or 127.0.0.1:9092); "
                            "client properties come from $STREAMS_KAFKA_* (e.g. STREAMS_KAFKA_SASL_PASSWORD)")
    group.add_argument("--timeout", type=duration_s, default=DEFAULT_TIMEOUT_S, metavar="DURATION",
                       help=f"how long to wait for the cluster before giving up (default: {DEFAULT_TIMEOUT_S:g}s)")


def kafka_settings(args: argparse.Namespace) -> KafkaSettings:
    """KafkaSettings from ``--bootstrap-servers``, else ``$STREAMS_*`` / ``$STREAMS_CONFIG``, else defaults."""
    return kafka_resolved(args).settings  # type: ignore[no-any-return]


def kafka_resolved(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Resolved:
    """:func:`kafka_settings` and where each value came from (``env``: default ``os.environ``)."""
    flags = {"bootstrap_servers": args.bootstrap_server} if getattr(args, "bootstrap_server", None) else {}
    return resolve(KafkaSettings, env=env, flags=flags)


def kafka_client_config(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """A confluent-kafka config for ``args``: settings, ``extra``, and a logger.

    librdkafka writes its logs (``%3|...|FAIL|...``) straight to stderr unless given
    a logger: this one drops them, or shows warnings and worse with ``--debug``.
    """
    return kafka_settings(args).client_config(logger=_kafka_logger(bool(getattr(args, "debug", False))), **extra)


def _kafka_logger(debug: bool) -> logging.Logger:
    logger = logging.getLogger("streams.cli.librdkafka")
    logger.propagate = False
    for old in list(logger.handlers):
        logger.removeHandler(old)
    handler: logging.Handler = logging.StreamHandler(sys.stderr) if debug else logging.NullHandler()
    handler.setFormatter(logging.Formatter("librdkafka: %(message)s"))
    logger.addHandler(handler)
    logger.addHandler(_PROBLEMS)  # an error line can then say why a connection failed
    logger.setLevel(logging.WARNING)
    return logger


# --- output ------------------------------------------------------------------------------------


def stdout_is_tty() -> bool:
    """True when stdout is a terminal: reports are rich tables then, plain text otherwise."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def print_json(record: Any) -> None:
    """Print ``record`` as indented JSON (orjson) on stdout."""
    data = orjson.dumps(record, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS) + b"\n"
    sys.stdout.flush()
    raw = getattr(sys.stdout, "buffer", None)
    if raw is None:  # a text-only stream (a test's capture, an embedding)
        sys.stdout.write(data.decode())
    else:
        raw.write(data)
        raw.flush()


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]],
                *, note: str = "") -> None:
    """Print a table: rich on a terminal, plain aligned text otherwise. Numbers align right."""
    right = [bool(rows) and all(_is_numeric(row[i]) for row in rows) for i in range(len(headers))]
    cells = [[_cell(v) for v in row] for row in rows]
    if stdout_is_tty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, title_justify="left", caption=note or None, caption_justify="left")
        for header, is_right in zip(headers, right):
            table.add_column(header, justify="right" if is_right else "left")
        for row in cells:
            table.add_row(*row)
        Console().print(table)
        return
    widths = [max([len(h)] + [len(row[i]) for row in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right)).rstrip()

    out = [title, line(headers), line(["-" * w for w in widths])] + [line(row) for row in cells]
    if note:
        out.append(note)
    print("\n".join(out) + "\n")


def print_fields(title: str, fields: Sequence[tuple[str, object]]) -> None:
    """Print ``name: value`` pairs: a two-column rich table on a terminal, aligned text otherwise."""
    if stdout_is_tty():
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title, title_justify="left", show_header=False)
        table.add_column(style="bold")
        table.add_column()
        for name, value in fields:
            table.add_row(name, _cell(value))
        Console().print(table)
        return
    width = max((len(name) for name, _ in fields), default=0)
    print("\n".join([title] + [f"{name.ljust(width)}  {_cell(value)}" for name, value in fields]) + "\n")


def _is_numeric(value: object) -> bool:
    """Numbers and percentages align right."""
    if isinstance(value, str):
        return value.endswith("%") and value[:-1].replace(".", "", 1).isdigit()
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if math.isfinite(value) else str(value)
    return str(value)
