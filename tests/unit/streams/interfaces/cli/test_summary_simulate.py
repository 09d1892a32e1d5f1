"""`chorus summary simulate`: the summary stage's batching and default tiers, offline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
from click.testing import CliRunner

from projections.model import Message, MessageType
from streams.interfaces.cli.main import main
from streams.records import SummaryRecord

T0 = datetime(2026, 4, 1, 9, tzinfo=UTC)


def line(channel: str, i: int, seconds: float, content: str) -> str:
    message = Message(
        id=f"{channel}-{i}",
        channel=channel,
        sender=["ann", "bob"][i % 2],
        type=MessageType.STATUS,
        content=content,
        created_at=T0 + timedelta(seconds=seconds),
    )
    return message.model_dump_json()


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", "utf-8")
    return path


def busy_and_slow() -> list[str]:
    busy = [line("team/busy", i, i, f"Step {i} of the schema migration passed.") for i in range(45)]
    # Ten minutes apart: each message falls due on its own by the time threshold (300 s).
    slow = [line("team/slow", i, 600 * i, f"Backup run {i} finished cleanly.") for i in range(3)]
    return [*busy[:30], *slow, *busy[30:]]


def test_json_gives_each_channels_final_record(tmp_path: Path) -> None:
    source = write(tmp_path / "m.jsonl", busy_and_slow())
    result = CliRunner().invoke(main, ["summary", "simulate", "--file", str(source), "--json"])
    assert result.exit_code == 0, result.output
    records = [SummaryRecord.model_validate(orjson.loads(x)) for x in result.stdout.splitlines()]
    by_channel = {r.channel: r for r in records}
    busy, slow = by_channel["team/busy"], by_channel["team/slow"]
    # 45 messages, 20 at a time: the last batch is the 5 left pending at the end.
    assert (busy.total_messages, busy.first_offset, busy.last_offset) == (45, 40, 44)
    assert (busy.first_message_id, busy.last_message_id) == ("team/busy-40", "team/busy-44")
    assert busy.annotations["tier"] == "digest" and "schema migration" in busy.text
    assert (slow.total_messages, slow.first_offset, slow.last_offset) == (3, 2, 2)
    assert slow.annotations["tier"] == "verbatim"
    assert slow.updated_at == T0 + timedelta(seconds=1200)


def test_text_output_and_bad_lines(tmp_path: Path) -> None:
    source = write(tmp_path / "m.jsonl", [*busy_and_slow(), "{not json", '{"channel": "x"}'])
    result = CliRunner().invoke(main, ["summary", "simulate", "--file", str(source)])
    assert result.exit_code == 2
    assert "== team/busy (45 messages) ==\nParticipants: ann, bob" in result.stdout
    assert "== team/slow (3 messages) ==" in result.stdout
    assert "line 49: not valid JSON" in result.stderr and "line 50: sender" in result.stderr
