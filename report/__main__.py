"""`python -m mirrorwatch.report`: the same as the mirrorwatch-report console script."""

import sys

from mirrorwatch.report.cli import main

sys.exit(main())
