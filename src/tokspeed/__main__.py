"""`python -m tokspeed` runs the CLI."""

import sys

from tokspeed.cli import main

sys.exit(main())
