"""Setting flags: one ``--<name>`` per setting, parsed as the setting's type, booleans included.

A setting's flag is named after the setting (:func:`streams.core.config.setting_name`),
so the same name works in the TOML file, as ``STREAMS_<NAME>`` and on the command
line. :func:`add_setting_flags` adds them for a settings class;
:func:`resolve_settings` builds the settings from the file, the environment and the
flags given (in :data:`~streams.core.config.SOURCE_ORDER`) and says where each value
came from. A flag not given leaves its dest ``None``, so the file and the
environment still apply.

A boolean setting takes ``--name`` (true), ``--name VALUE`` with VALUE one of
true/false, yes/no, 1/0, on/off (any case; anything else is a usage error naming
the flag), or ``--no-name`` (false). argparse's bool() as a type would make every
value, ``false`` included, True: :class:`BoolAction` replaces it.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, get_type_hints

from streams.core.config import (
    KafkaSettings,
    ProducerSettings,
    Resolved,
    TopicNames,
    WorkerSettings,
    env_var,
    flag,
    resolve,
    setting_name,
)
from streams.core.routing.placement import HASHES, PLACEMENTS

__all__ = ["BoolAction", "parse_bool", "add_setting_flags", "flag_values", "resolve_settings", "setting_dest",
           "TRUE_WORDS", "FALSE_WORDS"]

#: Words a boolean flag or variable accepts (any case).
TRUE_WORDS = ("true", "yes", "1", "on")
FALSE_WORDS = ("false", "no", "0", "off")

#: Extra negative spellings of boolean settings, beside the generic ``--no-<name>``.
NEGATIVE_ALIASES: Mapping[str, tuple[str, ...]] = {"balance_enabled": ("--no-balance",)}

#: Settings whose values are one of a few words: argparse checks them (a usage error, exit 2).
CHOICES: Mapping[str, Sequence[str]] = {
    "placement": PLACEMENTS, "hash": HASHES, "serializer": ("json", "avro"), "id_kind": ("uuid7", "snowflake"),
}

_PREFIX = {KafkaSettings: "kafka", TopicNames: "topics", ProducerSettings: "producer", WorkerSettings: "worker"}


def parse_bool(text: str) -> bool:
    """``text`` as a boolean (TRUE_WORDS / FALSE_WORDS, any case); raises ArgumentTypeError otherwise."""
    word = text.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean: use true/false, yes/no, 1/0 or on/off")


class BoolAction(argparse.Action):
    """``--name`` sets True, ``--name VALUE`` parses VALUE (:func:`parse_bool`), ``--no-name`` sets False.

    ``negatives`` are more spellings of ``--no-name`` (``--no-balance``). A bad value is
    an argparse error naming the flag (usage, exit 2).
    """

    def __init__(self, option_strings: Sequence[str], dest: str, negatives: Iterable[str] = (),
                 default: Any = None, help: str | None = None, **_: Any) -> None:  # noqa: A002 - argparse's name
        positives = list(option_strings)
        self.negatives = ["--no-" + positives[0][2:], *negatives]
        super().__init__(positives + self.negatives, dest, nargs="?", default=default, help=help, metavar="BOOL")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if option_string in self.negatives:
            if values is not None:
                raise argparse.ArgumentError(self, f"{option_string} takes no value (got {values!r})")
            setattr(namespace, self.dest, False)
            return
        try:
            setattr(namespace, self.dest, True if values is None else parse_bool(values))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None

    def format_usage(self) -> str:
        """``--name [BOOL] | --no-name``."""
        return f"{self.option_strings[0]} [BOOL] | {self.negatives[0]}"


def setting_dest(cls: type, field: str) -> str:
    """The argparse dest of a setting flag: ``<section>_<field>`` (``worker_bucket_width``)."""
    return f"{_PREFIX[cls]}_{field}"


def add_setting_flags(group: argparse._ActionsContainer, cls: type, fields: Iterable[str] | None = None, *,
                      helps: Mapping[str, str] | None = None, extra_names: Mapping[str, Sequence[str]] | None = None,
                      shown_defaults: Mapping[str, str] | None = None) -> None:
    """Add ``--<setting>`` for each of ``fields`` of settings ``cls`` (default: all but table-shaped ones) to ``group``.

    Each flag's help names its variable and default; ``helps`` adds what a setting
    means; ``extra_names`` adds more spellings of a flag (kept for old scripts);
    ``shown_defaults`` replaces the default the help shows (a command's own rule).
    Booleans use :class:`BoolAction`; ints and floats are parsed by argparse (range
    checks stay with the settings class); CHOICES settings list their words. A flag
    the command already defines is left to it.
    """
    hints, defaults = get_type_hints(cls), cls()
    names = [f.name for f in dataclasses.fields(cls)] if fields is None else list(fields)
    for field in names:
        hint, name = hints[field], setting_name(cls, field)
        if hint not in (bool, int, float, str):
            continue  # a table (client_properties): file or environment only
        default = (shown_defaults or {}).get(field, getattr(defaults, field))
        text = f"{(helps or {}).get(field, '')} (${env_var(name)}; default: {default})".strip()
        options = [flag(name), *(extra_names or {}).get(field, ())]
        if any(option in group._option_string_actions for option in options):
            continue  # the command defines this flag itself (its own spelling wins, never a clash)
        dest = setting_dest(cls, field)
        if hint is bool:
            group.add_argument(*options, dest=dest, action=BoolAction, negatives=NEGATIVE_ALIASES.get(field, ()),
                               help=text)
        elif field in CHOICES:
            group.add_argument(*options, dest=dest, choices=CHOICES[field], help=text)
        else:
            metavar = "N" if hint in (int, float) else ("NAME" if cls is TopicNames else name.rsplit("_", 1)[-1].upper())
            group.add_argument(*options, dest=dest, type=hint, metavar=metavar, help=text)


def flag_values(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings of ``cls`` given as flags in ``args`` (field -> value); flags not given are left out."""
    found = {}
    for f in dataclasses.fields(cls):
        value = getattr(args, setting_dest(cls, f.name), None)
        if value is not None:
            found[f.name] = value
    return found


def resolve_settings(args: argparse.Namespace, cls: type, env: Mapping[str, str] | None = None,
                     **flags: Any) -> Resolved:
    """Settings ``cls`` from the file, the environment (``env``, default ``os.environ``) and the flags in ``args``.

    ``flags`` adds values from flags that are not setting flags of ``cls`` (a
    command's own spelling). Raises ConfigError for a bad value, naming the setting
    and where it came from.
    """
    given = {**flag_values(args, cls), **{k: v for k, v in flags.items() if v is not None}}
    return resolve(cls, env=env, flags=given)
