"""The faust worker: the processing core (stage 1), the exact merge (stage 2), and the faust app that wires them.

``streams.worker.app`` creates the faust app at import (it reads settings then), so
import it only in a worker process: ``faust -A streams.app worker``.
"""
