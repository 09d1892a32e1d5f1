"""The recap stage's pure helpers and the watch view, without Kafka."""

from datetime import UTC, datetime, timedelta

from rich.console import Console

from projections.commitments import CommitmentProjection
from projections.model import ActorType, Message, MessageType
from projections.projection import fold
from projections.recap import RecapPhase
from projections.summarise.llm import Completion
from streams.interfaces.watch import render, status_line
from streams.worker.stages.recaps import (
    ChannelRecap,
    channel_commitments,
    with_message,
    write_recap,
)

NOW = datetime(2026, 6, 1, 10, tzinfo=UTC)


def msg(content: str | None, kind: MessageType = MessageType.STATUS, **extra: object) -> Message:
    return Message.model_validate(
        {"channel": "c", "sender": "ann", "type": kind, "content": content, **extra}
    )


def test_messages_arm_the_countdown_and_fill_the_window() -> None:
    recap = with_message(ChannelRecap(), msg("Plan the release train"), 0, 30, NOW)
    assert recap.status.phase is RecapPhase.PENDING
    assert recap.status.due_at == NOW + timedelta(seconds=30)
    assert recap.title == "Plan the release train"  # until a phrase repeats
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
    assert recap.window_offsets == list(range(31, 51))  # what the stage stores
    last = recap.messages()[-1]
    assert last.sender == "grep" and last.content == "x" * 299 + "…"  # cut, and says so
    assert with_message(recap, msg("dup"), 50, 30, NOW) is recap  # replayed offset


def test_the_title_follows_what_the_channel_is_about_not_its_first_message() -> None:
    lines = [
        "Hmm hmm hmm .",
        "So the remote control needs fewer buttons.",
        "Yeah.",
        "The remote control could have a rubber case.",
        "Okay.",
        "A rubber case and fewer buttons, then, for the remote control.",
    ]
    recap = ChannelRecap()
    for offset, line in enumerate(lines):
        recap = with_message(recap, msg(line), offset, 30, NOW)
        assert recap.title is None or len(recap.title) <= 60
    assert recap.title is not None and recap.title.startswith("Remote control")
    assert "rubber case" in recap.title and "button" in recap.title
    assert recap.opening == "So the remote control needs fewer buttons."


def test_a_channel_of_backchannel_has_no_title() -> None:
    recap = ChannelRecap()
    for offset, line in enumerate(["Hmm hmm hmm .", "yeah", "okay", "I think so, yeah."]):
        recap = with_message(recap, msg(line), offset, 30, NOW)
    assert recap.title is None


def test_channel_commitments_read_the_fold_as_dicts_with_excerpts_from_the_window() -> None:
    opener = msg("review it", MessageType.COMMAND, correlation_id="k1", target="role:reviewer")
    state = fold(CommitmentProjection(), [opener]).model_dump(mode="json")
    (found,) = channel_commitments(state, [opener])
    assert found.asked == "review it" and found.obligor == "role:reviewer"
    assert found.line().startswith("reviewer owes ann: “review it” (open since ")
    # A fold that already carries the excerpt (the commitments projection's own field) wins.
    commitment = next(iter(state["commitments"].values()))
    commitment["excerpt"] = "review the parser split"
    (found,) = channel_commitments(state, [])
    assert found.asked == "review the parser split"
    assert channel_commitments(None, [opener]) == []


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
    owed = channel_commitments(
        fold(
            CommitmentProjection(),
            [msg("add docs", MessageType.COMMAND, correlation_id="9f8e7d6c5b4a3f2e1d0c")],
        ).model_dump(mode="json"),
        [],
    )
    text, cost = await write_recap(client, [msg("split parser")], "Summary so far", owed)
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
    assert "Summary so far" in user and "ann: split parser" in user
    # What was asked comes from the commitment's excerpt (the ring holds no message here).
    assert "- someone owes ann: “add docs” (open since" in user
    assert "9f8e7d6c5b4a" not in user


async def test_write_recap_without_a_model_is_extractive() -> None:
    text, cost = await write_recap(
        None, [msg("ship the release notes", MessageType.COMMAND, correlation_id="z")], None, []
    )
    assert text.startswith("Goal (ann): ship the release notes.") and cost == {"tier": "extractive"}


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
    assert status_line(view) == "- | gpt-5.4 | #2 | Recaps help… | read_file,+2 | 3s | idle"
    decided = {**view, "decision": {"decision": "COMPLETE", "detail": None, "offset": 4}}
    assert status_line(decided).startswith("COMPLETE | gpt-5.4 | #2")
    console = Console(record=True, width=120)
    console.print(render([view]))
    out = console.export_text()
    assert "pairing/refactor  - | gpt-5.4 | #2 | Recaps help… | read_file,+2 | 3s | idle" in out
    assert "> Recaps keep shared context." in out
    console = Console(record=True, width=120)
    console.print(render([], "cannot reach the worker"))
    assert "cannot reach the worker" in console.export_text()
