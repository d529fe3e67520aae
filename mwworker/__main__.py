"""``python -m mwworker``: the Worker's CLI (``cli.py``)."""

import sys

from .cli import main

sys.exit(main())
