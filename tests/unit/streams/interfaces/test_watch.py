"""streams.interfaces.watch: the status line of each channel, without a worker."""

from __future__ import annotations

from rich.console import Console

from streams.interfaces.watch import render, status_line, tools_label


def test_tools_label_names_the_first_and_counts_the_rest() -> None:
    assert tools_label([]) == "-"
    assert tools_label(["grep"]) == "grep"
    assert tools_label(["grep", "sed", "awk"]) == "grep,+2"


def test_status_line_defaults_for_a_fresh_channel() -> None:
    assert status_line({"channel": "team/a"}) == "- | - | #0 | team/a | - | idle | idle"


def test_status_line_of_a_decided_channel() -> None:
    view = {
        "channel": "team/a",
        "decision": {"decision": "COMPLETE"},
        "model": "tiny",
        "message_count": 12,
        "title": "Release plan",
        "tools": ["grep", "sed"],
        "label": "recap in 3s",
        "activity": "typing",
    }
    assert (
        status_line(view) == "COMPLETE | tiny | #12 | Release plan | grep,+1 | recap in 3s | typing"
    )


def _text(renderable: object) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_render_shows_the_error_the_recap_and_an_empty_state() -> None:
    assert "no channels yet" in _text(render([]))
    shown = _text(render([{"channel": "team/a", "text": "All done."}], error="worker gone"))
    assert "worker gone" in shown
    assert "team/a" in shown and "> All done." in shown
    assert "no channels yet" not in shown
