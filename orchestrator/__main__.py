"""``python -m orchestrator``: the same command line as ``lowprec``."""

import sys

from .cli import main

sys.exit(main())
