"""Library code raises the StreamsError family, never a bare built-in, so callers can catch one base."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from streams.core import errors
from streams.core.errors import InvalidArgumentError, StreamsError
from streams.core.routing.hashing import kafka_partition

PACKAGE = Path(__file__).resolve().parents[2] / "streams"
BUILTINS = {"RuntimeError", "ValueError", "TypeError", "Exception"}


def test_every_public_error_is_a_documented_streams_error() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, StreamsError), name
        assert inspect.getdoc(cls), f"{name} has no docstring"


def test_no_module_raises_a_bare_builtin_error() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                if isinstance(target, ast.Name) and target.id in BUILTINS:
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} raises {target.id}")
    assert not found, "\n".join(found)


def test_a_bad_argument_is_a_streams_error_and_still_the_builtin_old_callers_catch() -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        kafka_partition(b"key", 0)
    assert isinstance(caught.value, StreamsError) and isinstance(caught.value, ValueError)
