"""Benchmarks: each script writes bench/results/<name>.json and prints a table (`make bench`)."""
