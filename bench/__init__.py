"""Benchmarks: chorus beside Quix Streams running the same fold, on one broker in one run.
Entry point: `python -m bench.run` (`make bench`); docs/benchmarks.md says what each phase
measures and how."""
