"""Plumbing both ID generators share: fork safety."""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class _ForkAware(Protocol):
    def _after_fork_in_child(self) -> None: ...


_OWNERS: weakref.WeakSet[_ForkAware] = weakref.WeakSet()


def reset_after_fork(owner: _ForkAware) -> None:
    """Call ``owner._after_fork_in_child()`` in every child forked from now on.

    A forked child inherits its parent's locks (possibly held by a thread that does
    not exist in the child) and any pool of random bits (which two processes would
    then share); owners replace both there.
    """
    _OWNERS.add(owner)


def _reset_all() -> None:
    for owner in list(_OWNERS):
        owner._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_all)
