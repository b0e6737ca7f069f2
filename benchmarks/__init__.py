"""Benchmarks (run as modules, e.g. ``python -m benchmarks.decode_bench``); not part of the tests."""
