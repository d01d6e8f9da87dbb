"""``faust -A streams.app worker``: the faust app, kept importable at its historical path.

The app lives in :mod:`streams.worker.app`; importing this module builds it.
"""

from streams.worker.app import app

__all__ = ["app"]
