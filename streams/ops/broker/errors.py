"""The broker's error type and the hint every "cannot provide a broker" message ends with.

No logic: declarations only.
"""

from __future__ import annotations

from streams.errors import ChorusError

NO_BROKER_HINT = "or set CHORUS_BOOTSTRAP_SERVERS to use an existing cluster"


class BrokerError(ChorusError):
    """The local broker could not be provisioned, started, or stopped."""
