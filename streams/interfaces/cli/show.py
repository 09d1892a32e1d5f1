"""What `chorus summary`, `recap`, `state`, `channels` and `topics create` print for a
person; their `--json` prints the answer as it is, for scripts.

Pure: from the worker's JSON answer (or, without a worker, the view of a compacted topic's
record) to text. Times read to the second in UTC, counts take their plural, an offset is
named as a partition offset, and what chorus keeps for itself (the digest's annotations)
is left to `--json`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from projections.commitments import CommitmentProjection
from projections.context import PARTITION_OFFSET, ChannelHeader, decision_phrase
from projections.overview import ChannelOverviewProjection
from projections.readable import OUTCOME_WORDS, commitment_views
from projections.termination import DEFAULT_TERMINATION
from projections.text.lines import counted
from streams.topology import TopicSpec

# The ended commitments `chorus state` lists (the state keeps more; `--json` has them all).
ENDED_LISTED = 10


def when(value: Any) -> str | None:
    """An ISO time (or a datetime) as "2026-12-01 10:02:05 UTC"; None when there is none."""
    if isinstance(value, str) and value:
        value = datetime.fromisoformat(value)
    return f"{value:%Y-%m-%d %H:%M:%S} UTC" if isinstance(value, datetime) else None


def spoken_duration(seconds: float) -> str:
    """A number of seconds in the largest unit that says it whole: "90 s", "5 min", "7 days"."""
    for size, unit in ((86_400, "day"), (3_600, "h"), (60, "min")):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return counted(count, unit) if unit == "day" else f"{count} {unit}"
    return f"{seconds:g} s"


def next_summary(due: Mapping[str, Any], first: bool) -> str:
    """When the next summary comes, from `due` (`after_messages`, `after_seconds`: the
    channel's thresholds; `pending`: messages since the last summary, None when unknown)."""
    count, seconds = int(due["after_messages"]), float(due["after_seconds"])
    pending = due.get("pending")
    which = "The first" if first else "The next"
    wait = f"{spoken_duration(seconds)} after the first of them"
    if pending is None:
        return (
            f"{which} comes after {counted(count, 'message')} or {wait}, whichever is first "
            "(the defaults; the channel's config may change them)."
        )
    if pending >= count:
        return f"{which} is due now: {counted(pending, 'message')} are waiting for it."
    if pending == 0:
        return f"{which} comes once {counted(count, 'more message')} arrive, or {wait}."
    more = counted(count - pending, "more message")
    return (
        f"{which} comes after {more} ({pending} of {count} so far) or {wait}, whichever is first."
    )


def summary_due(
    state: Mapping[str, Any] | None, summary: Mapping[str, Any], thresholds: tuple[int, float]
) -> dict[str, Any]:
    """`next_summary`'s facts: the channel's `thresholds` (after messages, after seconds) and
    how many messages the fold holds (EVENTs are not summarised) past those the latest
    summary covers, from the worker's state and summary answers."""
    folds: Mapping[str, Any] = (state or {}).get("projections") or {}
    overview = (folds.get(ChannelOverviewProjection.name) or {}).get("state") or {}
    said = int(overview.get("message_count") or 0) - int(
        (overview.get("by_type") or {}).get("EVENT") or 0
    )
    pending = max(said - int(summary.get("total_messages") or 0), 0)
    return {"after_messages": thresholds[0], "after_seconds": thresholds[1], "pending": pending}


def summary_text(view: Mapping[str, Any]) -> str:
    """The channel's summary: where it stands (what it covers, when and by which tier it
    was written), then its text (the narrative and the state part), then when the next one
    comes when `view` says (`next`: `next_summary`)."""
    channel = view.get("channel")
    content = view.get("content")
    due = view.get("next")
    if not content:
        first = f" {next_summary(due, first=True)}" if due else ""
        return f"No summary of {channel} yet.{first}"
    facts = [counted(int(view.get("total_messages") or 0), "message")]
    if view.get("last_offset") is not None:
        facts[0] += f" through {PARTITION_OFFSET} {view['last_offset']}"
    updated = when(view.get("updated_at"))
    if updated:
        facts.append(f"updated {updated}")
    tier = (view.get("annotations") or {}).get("tier")
    by = view.get("updated_by")
    if by and not str(by).startswith("system:"):
        facts.append(f"set by {by}")
    elif tier:
        facts.append(f"tier {tier}")
    shown = f"Summary of {channel} ({'; '.join(facts)}):\n{content}"
    return f"{shown}\n\n{next_summary(due, first=False)}" if due else shown


_PHASES = {
    "IDLE": "idle",
    "GENERATING": "being written",
    "COMPLETED": "written",
    "ERROR": "failed",
}


def recap_text(view: Mapping[str, Any]) -> str:
    """The channel's recap: its title, where the next one stands (due in, being written,
    failed), the decision when the worker gave it, then the latest recap and when it was
    written."""
    channel = view.get("channel")
    title = view.get("title")
    phase = str(view.get("phase") or "IDLE")
    record = view.get("recap") or {}
    if phase == "PENDING":
        status = f"the next is due in {view.get('label') or 'a moment'} of quiet"
    else:
        status = _PHASES.get(phase, phase.lower())
        if phase == "ERROR" and record.get("error"):
            status += f": {record['error']}"
    lines = [f"Recap of {channel}" + (f", “{title}”" if title else "") + f": {status}."]
    if view.get("decision"):
        lines.append(f"Decision: {decision_phrase(view['decision'])}.")
    text = view.get("text")
    if not text:
        lines.append("No recap yet.")
        return "\n".join(lines)
    facts = [
        fact
        for fact in (
            when(record.get("generated_at")),
            record.get("tier") and f"tier {record['tier']}",
            record.get("covered_offset") is not None
            and f"at {PARTITION_OFFSET} {record['covered_offset']}",
        )
        if fact
    ]
    lines.append("Latest recap" + (f" ({', '.join(facts)})" if facts else "") + ":")
    lines.append(str(text))
    return "\n".join(lines)


def state_text(view: Mapping[str, Any]) -> str:
    """Where the channel stands, as its folds hold it: the decision and the counts, who
    takes part, the commitments (open ones, and the most recently ended), the termination
    conditions, and which other projections `--json` shows."""
    channel = str(view.get("channel"))
    folds: Mapping[str, Any] = view.get("projections") or {}
    overview = (folds.get(ChannelOverviewProjection.name) or {}).get("state") or {}
    offsets = [
        offset
        for fold in folds.values()
        if isinstance(offset := fold.get("offset"), int) and offset >= 0
    ]
    header = ChannelHeader(
        channel=channel,
        decision=view.get("decision") or {},
        offset=max(offsets) if offsets else None,
        at=datetime.fromisoformat(overview["last_activity"])
        if overview.get("last_activity")
        else None,
        message_count=int(overview.get("message_count") or 0),
    )
    lines = [header.line()]
    participants: Mapping[str, int] = overview.get("participants") or {}
    if participants:
        busiest = sorted(participants.items(), key=lambda item: -item[1])
        named = ", ".join(f"{name} {count}" for name, count in busiest)
        lines.append(f"Participants ({len(participants)}, by messages): {named}.")
    commitments = (folds.get(CommitmentProjection.name) or {}).get("state")
    if commitments:
        lines.extend(_commitments(commitments))
    config = view.get("config") or {}
    termination = config.get("termination") or []
    said = " | ".join(termination or DEFAULT_TERMINATION)
    lines.append(f"Termination: {said}{'' if termination else ' (the default)'}.")
    others = [
        f"{name} v{fold.get('version')}"
        for name, fold in folds.items()
        if name not in (CommitmentProjection.name, ChannelOverviewProjection.name)
    ]
    if others:
        lines.append(f"Other projections (their states with --json): {', '.join(others)}.")
    return "\n".join(lines)


def _commitments(state: Mapping[str, Any]) -> list[str]:
    views = commitment_views(state)
    opened = sorted((v for v in views if v.is_open), key=lambda v: v.since, reverse=True)
    ended = [v for v in reversed(views) if not v.is_open]
    counts: Mapping[str, int] = state.get("ended") or {}
    how = ", ".join(
        f"{counts[name]} {word}" for name, word in OUTCOME_WORDS.items() if counts.get(name)
    )
    total = sum(counts.values())
    lines = [
        f"Commitments: {int(state.get('opened') or 0)} opened, {len(opened)} open, "
        f"{total} ended" + (f" ({how})" if how else "") + "."
    ]
    untracked = int(state.get("untracked") or 0)
    if untracked:
        # What the active-commitments bound left out: the lists below never show them.
        lines.append(
            f"{untracked:,} more {'request was' if untracked == 1 else 'requests were'} not "
            "tracked: the channel was at its cap of active commitments "
            "(CHORUS_COMMITMENTS_MAX_ACTIVE); none of them is listed here."
        )
    if opened:
        lines.append(f"Open ({len(opened)}, newest first):")
        lines.extend(f"- {view.line()}" for view in opened)
    if ended:
        shown = ended[:ENDED_LISTED]
        lines.append(f"Ended (the last {len(shown)}, most recent first):")
        lines.extend(f"- {view.line()}" for view in shown)
    return lines


def channels_text(decisions: Mapping[str, Any]) -> str:
    """Each channel the worker folded and where it stands, one a line, in name order."""
    if not decisions:
        return "No channels folded yet."
    width = max(len(name) for name in decisions)
    return "\n".join(
        f"{name:<{width}}  {decision_phrase(decision)}"
        for name, decision in sorted(decisions.items())
    )


def topic_line(spec: TopicSpec, created: bool) -> str:
    """What `chorus topics create` made of a topic, in words: "chorus.messages: created; 4
    partitions, kept forever, records up to 1,114,112 bytes"."""
    config = spec.config
    facts = [counted(spec.partitions, "partition")]
    if spec.replication_factor != 1:
        facts.append(counted(spec.replication_factor, "replica"))
    if config.get("cleanup.policy") == "compact":
        facts.append("compacted (the latest record of each channel is kept)")
    else:
        retention = int(config.get("retention.ms", "-1"))
        facts.append(
            "kept forever" if retention < 0 else f"kept {spoken_duration(retention / 1000)}"
        )
    if "max.message.bytes" in config:
        facts.append(f"records up to {int(config['max.message.bytes']):,} bytes")
    return f"{spec.name}: {'created' if created else 'already there'}; {', '.join(facts)}"
