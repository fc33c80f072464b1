"""Helpers of the test suite (and of the benchmark and chaos runs), by role: see the
table in docs/testing.md."""
