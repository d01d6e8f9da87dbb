"""The optional compiled hot paths (the ``streams-native`` extension in ``native/``).

The package runs without it: every compiled function has a Python twin that does the
same work, and each user of one (key canonicalisation and Kafka's placement in
:mod:`streams.core.routing.hashing`, stage 1's event scan in
:mod:`streams.core.eventscan`) checks it against that twin on probes at import and
keeps the twin if they disagree. ``make setup`` builds and installs it (Rust, from
crates.io); ``STREAMS_NATIVE=0`` in the environment turns it off.

:data:`NATIVE` is the loaded module or None; :data:`NATIVE_STATUS` says why.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["ABI", "NATIVE", "NATIVE_STATUS", "load_native"]

#: The interface version this package was written against; the module states its own.
ABI = 1


def load_native(environ: dict[str, str] | None = None) -> tuple[ModuleType | None, str]:
    """Import ``streams_native`` unless turned off; returns (module or None, a status for humans).

    None when ``STREAMS_NATIVE`` is ``0``, when it is not installed, or when it was
    built for another interface version (a stale build must not be trusted).
    """
    env = os.environ if environ is None else environ
    if env.get("STREAMS_NATIVE", "1").strip() == "0":
        return None, "off (STREAMS_NATIVE=0)"
    try:
        import streams_native  # type: ignore[import-not-found]
    except ImportError:
        return None, "not installed (pure Python)"
    abi = getattr(streams_native, "ABI", None)
    if abi != ABI:
        return None, f"streams-native built for interface {abi}, this package needs {ABI} (pure Python)"
    return streams_native, "streams-native"


NATIVE, NATIVE_STATUS = load_native()
