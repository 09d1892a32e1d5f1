"""The recap stage's pure helpers and the watch view, without Kafka."""

from datetime import UTC, datetime, timedelta

from rich.console import Console

from projections.commitments import CommitmentProjection
from projections.model import ActorType, Message, MessageType
from projections.projection import fold
from projections.recap import RecapPhase
from projections.summarise.llm import Completion
from streams.recaps import ChannelRecap, open_commitment_lines, with_message, write_recap
from streams.watch import render, status_line

NOW = datetime(2026, 6, 1, 10, tzinfo=UTC)


def msg(content: str | None, kind: MessageType = MessageType.STATUS, **extra: object) -> Message:
    return Message.model_validate(
        {"channel": "c", "sender": "ann", "type": kind, "content": content, **extra}
    )


def test_messages_arm_the_countdown_and_fill_the_window() -> None:
    recap = with_message(ChannelRecap(), msg("Plan the release train"), 0, 30, NOW)
    assert recap.status.phase is RecapPhase.PENDING
    assert recap.status.due_at == NOW + timedelta(seconds=30)
    assert recap.title == "Plan the release train"
    assert recap.message_count == 1 and len(recap.window) == 1
    typing = msg(None, MessageType.EVENT, payload={"kind": "typing"})
    later = with_message(recap, typing, 1, 30, NOW + timedelta(seconds=10))
    assert later.status.due_at == NOW + timedelta(seconds=40)  # activity restarts it
    assert later.message_count == 1 and len(later.window) == 1  # but is not conversation


def test_window_is_bounded_and_tools_are_listed() -> None:
    recap = ChannelRecap()
    for i in range(50):
        recap = with_message(recap, msg(f"m{i}"), i, 30, NOW)
    tool = msg("x" * 500, actor_type=ActorType.TOOL, sender="grep")
    recap = with_message(recap, tool, 50, 30, NOW)
    assert len(recap.window) == 20 and recap.tools == ["grep"]
    last = recap.messages()[-1]
    assert last.sender == "grep" and last.content == "x" * 300  # only what the transcript shows
    assert with_message(recap, msg("dup"), 50, 30, NOW) is recap  # replayed offset


def test_long_titles_are_cut() -> None:
    recap = with_message(ChannelRecap(), msg("a very long first message about things"), 0, 1, NOW)
    assert recap.title == "a very long first messa…"


def test_open_commitment_lines() -> None:
    state = fold(
        CommitmentProjection(),
        [msg("review it", MessageType.COMMAND, correlation_id="k1", target="role:reviewer")],
    )
    assert open_commitment_lines(state) == ["k1: COMMAND from ann to role:reviewer (open)"]


class FakeClient:
    model = "tiny"

    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[tuple[str, str]] = []

    async def complete(self, system: str, user: str, max_tokens: int) -> Completion:
        self.prompts.append((system, user))
        return Completion(self.text, "tiny", 120, 30, 15)


async def test_write_recap_with_a_model_cleans_and_costs() -> None:
    client = FakeClient("- We are splitting the parser.\nNext: write docs.")
    text, cost = await write_recap(client, [msg("split parser")], "Summary so far", ["k1: open"])
    assert text == "We are splitting the parser. Next: write docs."
    assert cost == {
        "tier": "synthesised",
        "model": "tiny",
        "tokens_in": 120,
        "tokens_out": 30,
        "latency_ms": 15,
    }
    system, user = client.prompts[0]
    assert "40" in system and "80" in system
    assert "Summary so far" in user and "k1: open" in user and "ann: split parser" in user


async def test_write_recap_without_a_model_is_extractive() -> None:
    text, cost = await write_recap(
        None, [msg("ship it", MessageType.COMMAND, correlation_id="z")], None, []
    )
    assert text.startswith("Extractive recap (no model): ") and cost == {"tier": "extractive"}


def test_watch_renders_status_lines_and_recaps() -> None:
    view = {
        "channel": "pairing/refactor",
        "model": "gpt-5.4",
        "message_count": 2,
        "title": "Recaps help…",
        "tools": ["read_file", "grep", "edit"],
        "label": "3s",
        "activity": "idle",
        "text": "Recaps keep shared context.",
    }
    assert status_line(view) == "gpt-5.4 | #2 | Recaps help… | read_file,+2 | 3s | idle"
    console = Console(record=True, width=120)
    console.print(render([view]))
    out = console.export_text()
    assert "pairing/refactor  gpt-5.4 | #2 | Recaps help… | read_file,+2 | 3s | idle" in out
    assert "> Recaps keep shared context." in out
    console = Console(record=True, width=120)
    console.print(render([], "cannot reach the worker"))
    assert "cannot reach the worker" in console.export_text()
