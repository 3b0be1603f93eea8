"""``python -m mirrorwatch.doctor``: the same as the ``mirrorwatch-doctor`` console script."""

from mirrorwatch.doctor.cli import main

raise SystemExit(main())
