"""Recaps: a short "where were we" note per channel, produced once the channel goes quiet.

A recap is a hidden furnace: another inference call the system decides to make. So the
decision is a debounce, not a trigger: the countdown restarts while people are still busy,
and once a recap exists for the current conversation nothing burns again until the
conversation itself changes.

Everything here is pure: `phase` (when a recap is due), `prompt` (what a model is given
and what of its answer is kept), `extractive` (the recap without a model) and `state` (the
goal, what is open and the next step, rendered from the commitments fold when a recap is
read: a recap record is history only).
"""

from projections.recap.extractive import RECAP_MAX_WORDS, RECAP_MIN_WORDS, extractive_recap
from projections.recap.phase import (
    RecapPhase,
    RecapStatus,
    countdown_label,
    due,
    is_conversation_change,
    on_generation_failed,
    on_generation_started,
    on_generation_succeeded,
    on_message,
    status_as_read,
)
from projections.recap.prompt import (
    RECAP_SYSTEM_PROMPT,
    build_recap_prompt,
    clean_recap,
    presentation_transcript,
)
from projections.recap.state import with_recap_state

__all__ = [
    "RECAP_MAX_WORDS",
    "RECAP_MIN_WORDS",
    "RECAP_SYSTEM_PROMPT",
    "RecapPhase",
    "RecapStatus",
    "build_recap_prompt",
    "clean_recap",
    "countdown_label",
    "due",
    "extractive_recap",
    "is_conversation_change",
    "on_generation_failed",
    "on_generation_started",
    "on_generation_succeeded",
    "on_message",
    "presentation_transcript",
    "status_as_read",
    "with_recap_state",
]
