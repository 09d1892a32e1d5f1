"""`ChorusError`, the base of every chorus exception (no click types here: the CLI turns a
ChorusError into its one-line message and exit status)."""

from projections.errors import ChorusError

__all__ = ["ChorusError"]
