"""The one base of every chorus exception, domain and shell alike.

It lives in the pure domain so that domain errors (`MessageError`, `StaleFoldError`,
`LlmError`) can derive from it too; `streams.errors` re-exports it for the shell.
"""

from __future__ import annotations


class ChorusError(Exception):
    """Something chorus refuses or cannot do, with a message fit for the person who asked."""
