"""streams.replay.speed: the benchmark's figures (the measurement itself needs Kafka and is
in tests/integration/test_replay.py)."""

from __future__ import annotations

from streams.replay.speed import Benchmark


def test_the_ratio_is_replay_over_raw_and_zero_without_a_raw_rate() -> None:
    assert Benchmark(messages=10, raw_rate=200.0, decode_rate=150.0, replay_rate=100.0).ratio == 0.5
    assert Benchmark(messages=0, raw_rate=0.0, decode_rate=0.0, replay_rate=10.0).ratio == 0.0


def test_as_json_rounds_the_rates() -> None:
    figures = Benchmark(
        messages=10,
        raw_rate=1000.4,
        decode_rate=900.6,
        replay_rate=333.3,
        single_rate=300.2,
        workers=2,
        parallel_rate=333.3,
    ).as_json()
    assert figures == {
        "messages": 10,
        "raw_messages_per_s": 1000,
        "decode_only_messages_per_s": 901,
        "replay_messages_per_s": 333,
        "replay_vs_raw": 0.333,
        "replay_one_process_messages_per_s": 300,
        "workers": 2,
        "replay_workers_messages_per_s": 333,
    }
