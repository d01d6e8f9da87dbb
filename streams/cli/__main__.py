"""``python -m streams.cli``: the same as the ``streams`` console script."""

import sys

from streams.cli import main

sys.exit(main())
