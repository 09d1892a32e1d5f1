"""Benchmarks: chorus against the limit (Kafka's consumer, a raw aiokafka read) and a peer
(Quix Streams), on one broker in one run. Entry point: `python -m bench.run` (`make bench`).
"""
