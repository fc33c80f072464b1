"""The benchmark: `python -m bench` measures the system and its baselines, prints a table.

It starts everything it measures on localhost (PostgreSQL, migrations, the fake provider, the
API, workers), drives load over keep-alive connections with bounded request counts and
durations, and writes the figures with a description of the machine under `bench/results/`.
See docs/benchmark.md.
"""
