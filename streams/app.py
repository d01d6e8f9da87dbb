"""``faust -A streams.app worker``: the worker's faust app, built from the environment on import.

The settings come from ``STREAMS_*`` variables and the TOML file named by
``STREAMS_CONFIG`` (:func:`streams.core.config.load`). To build a worker from settings
objects instead (tests, embedding), call :func:`streams.worker.app.create_app`.
"""

from streams.worker.app import app_from_environment

app = app_from_environment()

__all__ = ["app"]
