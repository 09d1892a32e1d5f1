"""What the text tests share: a transcript with each kind of noise the cleaner takes out."""

from __future__ import annotations

TRANSCRIPT = (
    "Um , so the remote control {disfmarker} the remote control needs fewer buttons . "
    "Uhh , yeah . I mean , the the battery battery is fine , I dunno why . "
    "We decided on rubber ! Hmmm what about 9f8e7d6c5b4a3f2e ids ?"
)
