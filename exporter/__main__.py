"""`python -m mirrorwatch.exporter` runs the exporter CLI."""

from mirrorwatch.exporter.cli import main

main()
