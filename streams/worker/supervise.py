"""`chorus worker`: both roles as child processes (`chorus worker --role fold|context`),
supervised.

A child that exits is reported in one log line and started again after a short backoff;
a role that needs more than `RestartPolicy.max_restarts` restarts within `window` seconds
makes the supervisor stop the other and exit 1. SIGTERM or SIGINT (Ctrl-C) is forwarded
to both; the supervisor waits for them and exits, at most `STOP_GRACE_SECONDS` (the
children's own deadline, `streams.worker.run`) and a second later: a child still running
then is killed, and the exit status is 143 as for a worker that stopped late.

The children share the supervisor's process group (a signal to the group reaches all
three) and, on Linux, get SIGTERM if the supervisor dies without stopping them.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from streams.settings import Settings
from streams.topology import ROLES, Role
from streams.worker.run import EXIT_STOPPED_LATE, STOP_GRACE_SECONDS, create_role_topics

log = logging.getLogger(__name__)

# How often the supervisor looks at its children.
POLL_SECONDS = 0.2
# What the supervisor waits beyond the children's own stop deadline before killing them.
STOP_MARGIN_SECONDS = 1.0
EXIT_GAVE_UP = 1


@dataclass(frozen=True)
class RestartPolicy:
    """Restart a dead role after `backoff[n]` seconds (n: its restarts within `window`, the
    last value beyond), at most `max_restarts` times within `window` seconds."""

    backoff: tuple[float, ...] = (0.5, 2.0, 5.0)
    max_restarts: int = 5
    window: float = 60.0


class RestartBudget:
    """The restarts of one role within the policy's window (pure: times are given)."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.restarts: deque[float] = deque()

    def _forget(self, now: float) -> None:
        while self.restarts and self.restarts[0] <= now - self.policy.window:
            self.restarts.popleft()

    def allows(self, now: float) -> bool:
        self._forget(now)
        return len(self.restarts) < self.policy.max_restarts

    def delay(self, now: float) -> float:
        """How long to wait before the next restart."""
        self._forget(now)
        backoff = self.policy.backoff
        return backoff[min(len(self.restarts), len(backoff) - 1)]

    def record(self, now: float) -> int:
        """Count a restart at `now`; how many there were within the window, this one too."""
        self._forget(now)
        self.restarts.append(now)
        return len(self.restarts)


class Child(Protocol):
    """What the supervisor needs of a child process (`subprocess.Popen` has it)."""

    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


Spawn = Callable[[Role], Child]


class Supervisor:
    """Runs `roles` as children, restarts the dead ones and stops all on a signal.

    `spawn`, `clock` and `sleep` are parameters so the logic runs without processes."""

    def __init__(
        self,
        spawn: Spawn,
        roles: Sequence[Role] = ROLES,
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        grace: float = STOP_GRACE_SECONDS + STOP_MARGIN_SECONDS,
    ) -> None:
        self.spawn = spawn
        self.roles = tuple(roles)
        self.policy = policy or RestartPolicy()
        self.clock = clock
        self.sleep = sleep
        self.grace = grace
        self.children: dict[Role, Child] = {}
        self.budgets = {role: RestartBudget(self.policy) for role in self.roles}
        # role -> when it is started again (dead, backing off)
        self.restart_at: dict[Role, float] = {}
        self.stop_signal: int | None = None

    def request_stop(self, sig: int) -> None:
        """Called from the signal handler: stop at the next step."""
        if self.stop_signal is None:
            self.stop_signal = sig

    def start(self) -> None:
        for role in self.roles:
            self.children[role] = self.spawn(role)
            log.info("started the %s role (pid %s)", role, self.children[role].pid)

    def step(self) -> int | None:
        """Look at the children once: schedule restarts of the dead, start the due ones.
        An exit status when the supervisor must stop (a role restarted too often)."""
        now = self.clock()
        for role, child in self.children.items():
            if role in self.restart_at:
                continue
            code = child.poll()
            if code is None:
                continue
            budget = self.budgets[role]
            if not budget.allows(now):
                log.error(
                    "the %s role (pid %s) exited with %s after %d restarts within %gs; "
                    "stopping the worker",
                    role,
                    child.pid,
                    code,
                    self.policy.max_restarts,
                    self.policy.window,
                )
                return EXIT_GAVE_UP
            delay = budget.delay(now)
            count = budget.record(now)
            log.warning(
                "the %s role (pid %s) exited with %s; restarting it in %gs "
                "(restart %d of at most %d within %gs)",
                role,
                child.pid,
                code,
                delay,
                count,
                self.policy.max_restarts,
                self.policy.window,
            )
            self.restart_at[role] = now + delay
        for role, at in list(self.restart_at.items()):
            if at <= now and self.stop_signal is None:
                del self.restart_at[role]
                self.children[role] = self.spawn(role)
                log.info("started the %s role again (pid %s)", role, self.children[role].pid)
        return None

    def run(self) -> int:
        """Start the roles and supervise them until a signal or too many restarts."""
        self.start()
        status: int | None = None
        while self.stop_signal is None and status is None:
            status = self.step()
            if status is None:
                self.sleep(POLL_SECONDS)
        stopped = self.stop(self.stop_signal or signal.SIGTERM)
        return status if status is not None else stopped

    def stop(self, sig: int) -> int:
        """Forward `sig` to every running child and wait for them, at most `grace`
        seconds; then kill what still runs. 0 when all stopped in time, else 143."""
        running = {role: child for role, child in self.children.items() if child.poll() is None}
        for child in running.values():
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(sig)
        deadline = self.clock() + self.grace
        late = False
        while running:
            for role, child in list(running.items()):
                code = child.poll()
                if code is not None:
                    late = late or code == EXIT_STOPPED_LATE
                    del running[role]
            if not running:
                break
            if self.clock() >= deadline:
                for role, child in running.items():
                    log.error(
                        "the %s role (pid %s) did not stop within %gs; killing it",
                        role,
                        child.pid,
                        self.grace,
                    )
                    child.kill()
                return EXIT_STOPPED_LATE
            self.sleep(POLL_SECONDS / 2)
        return EXIT_STOPPED_LATE if late else 0


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the supervisor dies (Linux; else nothing)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def spawn_role(loglevel: str) -> Spawn:
    """Start `chorus worker --role ROLE` with this interpreter, in this process group."""

    def spawn(role: Role) -> Child:
        command = [sys.executable, "-m", "streams.interfaces.cli", "worker"]
        command += ["--role", role, "--loglevel", loglevel]
        return subprocess.Popen(command, preexec_fn=_die_with_parent)

    return spawn


def supervise(
    settings: Settings, loglevel: str = "info", policy: RestartPolicy | None = None
) -> int:
    """Run both roles until SIGTERM or SIGINT; the exit status (see the module). The topics
    and both roles' changelogs are created first: a broker that cannot be reached is
    reported once (and raised), not by two children restarted again and again."""
    create_role_topics(settings)
    logging.basicConfig(
        level=loglevel.upper(), format="[%(asctime)s] [supervisor] %(levelname)s %(message)s"
    )
    supervisor = Supervisor(spawn_role(loglevel), policy=policy)

    def on_signal(sig: int, _: object) -> None:
        supervisor.request_stop(sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return supervisor.run()
