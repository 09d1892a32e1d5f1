"""bench.channels: the N channels it produces (a COMMAND and its reply each, one in ten left
open a day) and the channels table beside Quix Streams."""

from __future__ import annotations

from collections import Counter

import orjson

from bench.channels import (
    BLOCK,
    KEEPALIVE_CONTEXT,
    KEEPALIVE_EXCERPTS,
    KEEPALIVE_LINE_CHARS,
    OPEN_EVERY,
    channel_records,
    keepalives_lost,
)
from bench.report import channels
from projections.model import decode_message


def test_each_channel_is_a_command_and_its_reply_one_in_ten_left_open_a_day() -> None:
    records = channel_records(2 * BLOCK + 10, "many", ["write the changelog", "done it"])
    assert len(records) == 2 * (2 * BLOCK + 10)
    per_channel: dict[bytes, list[dict[str, object]]] = {}
    for key, value in records:
        per_channel.setdefault(key, []).append(orjson.loads(value))
    assert len(per_channel) == 2 * BLOCK + 10
    kinds = Counter(tuple(m["type"] for m in messages) for messages in per_channel.values())
    opened = kinds[("COMMAND", "STATUS")]
    assert opened == len([i for i in range(2 * BLOCK + 10) if i % OPEN_EVERY == 0])
    assert kinds[("COMMAND", "DONE")] == 2 * BLOCK + 10 - opened
    for messages in per_channel.values():
        command, reply = messages
        assert reply["in_reply_to"] == command["id"]
        assert reply["correlation_id"] == command["correlation_id"]
        assert ("deadline" in command) is (reply["type"] == "STATUS")
        for message in messages:  # valid messages: the fold folds them
            decode_message(orjson.dumps(message))


def test_a_block_sends_its_commands_before_their_replies() -> None:
    records = channel_records(BLOCK, "many", ["x"])
    types = [orjson.loads(value)["type"] for _, value in records]
    assert types[:BLOCK] == ["COMMAND"] * BLOCK
    assert set(types[BLOCK:]) == {"DONE", "STATUS"}


def test_the_channels_table_gives_each_system_beside_quix() -> None:
    system = {
        "fold": {
            "msgs_per_s": 3000.0,
            "cpu_ms_per_msg": 0.46,
            "cpu_ms_per_msg_by_process": {"context": 0.2, "fold": 0.25, "supervisor": 0.01},
        },
        "wake": {
            "wake_ms": {"p50": 8.0, "p95": 9.0, "p99": 12.0},
            "max_ms": 96.0,
            "never_woken": 0,
            "followed_published": {"summaries": 1500, "recaps": 40},
        },
        "peak_rss_mib": {"fold": 700.0, "context": 600.0},
        "timers_slowest_s": {"expire-commitments": 0.004, "checkpoint": 0.05},
        "timers_held_slowest_s": {"expire-commitments": 0.003, "checkpoint": 0.02},
        "timers_held_cpu_slowest_s": {"expire-commitments": 0.003, "checkpoint": 0.004},
        "keepalives_lost": 0,
        "stop": {"seconds": 1.5},
        "warm": {"folding_s": 3.0, "ready_s": 4.0},
        "cold": {"folding_s": 30.0, "ready_s": 31.0},
    }
    # A result from before the followed topics were counted says so.
    wake_before = {
        key: value for key, value in system["wake"].items() if key != "followed_published"
    }
    quix = {
        **system,
        "fold": {"msgs_per_s": 2000.0, "cpu_ms_per_msg_by_process": {"quix": 0.23}},
        "timers_slowest_s": {},
        "wake": wake_before,
    }
    result = {
        "channels": 1000,
        "messages": 2000,
        "open_every": 10,
        "probe": {"rate": 100.0, "channels": 200, "seconds": 60.0},
        "chorus": system,
        "quix": quix,
    }
    lines = channels(result)
    row = next(line for line in lines if line.startswith("| chorus"))
    assert "| 3,000 | 1.50× | 0.46 (context 0.20, fold 0.25, supervisor 0.01) |" in row
    assert "fold 700, context 600" in row
    assert "8.0 / 9.0 / 12 / 96 | 0 | 1,500 / 40 |" in row
    assert "| checkpoint 50 ms | checkpoint 20 ms (CPU 4.0 ms) |" in row
    assert "3.0 / 4.0 / 30.0 / 31.0" in row
    quix_row = next(line for line in lines if line.startswith("| quix"))
    assert "8.0 / 9.0 / 12 / 96 | 0 | — |" in quix_row
    assert "| 2,000 | 1.00× | — |" in quix_row  # one process: its share is the whole


def test_a_lost_keepalive_keeps_the_log_lines_before_it_in_the_result() -> None:
    log = [f"line {n}" for n in range(100)]
    log[60] = "[WARNING] AIOKafkaConsumerThread: Thread keepalive is not responding..."
    log[90] = "[WARNING] AIOKafkaConsumerThread: Thread keepalive is not responding..."
    lost = keepalives_lost("\n".join(log))
    assert lost["count"] == 2
    first, second = lost["before"]
    assert first == log[60 + 1 - KEEPALIVE_CONTEXT : 61]
    assert second[-1] == log[90] and len(second) == KEEPALIVE_CONTEXT
    assert keepalives_lost("all well\n") == {"count": 0, "before": []}


def test_the_result_keeps_the_first_few_losses_each_line_cut() -> None:
    lost_line = "keepalive is not responding " + "x" * 1_000
    lost = keepalives_lost("\n".join([lost_line] * (KEEPALIVE_EXCERPTS + 2)))
    assert lost["count"] == KEEPALIVE_EXCERPTS + 2
    assert len(lost["before"]) == KEEPALIVE_EXCERPTS
    assert all(len(line) == KEEPALIVE_LINE_CHARS for lines in lost["before"] for line in lines)


def test_the_channels_section_shows_the_log_up_to_the_first_lost_keepalive() -> None:
    result = {
        "channels": 10,
        "messages": 20,
        "open_every": 10,
        "probe": {"rate": 100.0, "channels": 200, "seconds": 60.0},
        "chorus": {
            "keepalives_lost": 1,
            "keepalives_lost_log": [["timer recap-deadlines ran 2.6 s", "keepalive lost"]],
        },
    }
    lines = channels(result)
    shown = lines[lines.index("```") + 1 : -1]
    assert shown == ["timer recap-deadlines ran 2.6 s", "keepalive lost"]
