"""The project's Avro schemas (``*.avsc``), installed as the ``streams.schemas`` package data.

This folder is their one source; ``pyproject.toml`` maps it into the package, and
:func:`streams.core.serde.load_schema` reads it with ``importlib.resources``.
"""
