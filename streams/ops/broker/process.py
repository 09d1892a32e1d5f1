"""Node processes: launching them detached, telling ours from others, stopping them.

Only processes whose command line is ``kafka.Kafka`` with the node's ``server.properties``
are ever signalled, so a recycled pid in a stale state file is left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from streams.ops.broker.errors import BrokerError
from streams.ops.broker.state import NodeInfo

# Starts each launch's part of stdout.log, so a failure shows only the last launch's output.
LAUNCH_HEADER = "=== chorus:"
_KAFKA_MAIN_CLASS = "kafka.Kafka"

# Popen objects of nodes started by this process, so exited children are reaped (a zombie
# still answers kill(pid, 0)).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def cmdline(pid: int) -> list[str] | None:
    """The process's command line, None when it is gone or unreadable."""
    proc = Path(f"/proc/{pid}/cmdline")
    if Path("/proc/self").exists():
        try:
            raw = proc.read_bytes()
        except OSError:
            return None
        return [p.decode("utf-8", "replace") for p in raw.split(b"\0") if p]
    try:  # no procfs (macOS)
        out = subprocess.run(
            ["ps", "-ww", "-o", "command=", "-p", str(pid)],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.split() if out else None


def pid_running(pid: int) -> bool:
    """pid exists and is not a zombie (exited children of ours are reaped here)."""
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is None:
            return True
        del _CHILDREN[pid]
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return not Path("/proc/self").exists()  # no procfs: kill(pid, 0) is all we have
    except OSError:
        return True
    state = stat.rsplit(")", 1)[-1].split()[:1]
    return state not in (["Z"], ["X"])


def _runs_node(args: list[str], config: Path) -> bool:
    return _KAFKA_MAIN_CLASS in args and str(config) in args


def is_our_node(pid: int | None, config: Path) -> bool:
    """True when pid is alive and runs kafka.Kafka with this node's server.properties."""
    if pid is None or pid <= 0 or not pid_running(pid):
        return False
    args = cmdline(pid)
    if not args:
        return False
    return _runs_node(args, config)


def live_pid(node: NodeInfo) -> int | None:
    """The node's recorded pid if that process still runs this node, else None."""
    if node.pid is not None and is_our_node(node.pid, node.config):
        return node.pid
    return None


def _still_exiting_or_ours(pid: int, config: Path) -> bool:
    # A dying process loses its cmdline before it closes its sockets: count it as alive.
    if not pid_running(pid):
        return False
    args = cmdline(pid)
    return not args or _runs_node(args, config)


def send_signal(pid: int, sig: int) -> None:
    """Signal pid; one that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def wait_gone(procs: Sequence[tuple[int, Path]], timeout: float) -> list[tuple[int, Path]]:
    """Wait until the (pid, config) processes exit; return those still running after timeout."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive:
        alive = [(pid, cfg) for pid, cfg in alive if _still_exiting_or_ours(pid, cfg)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return alive


def terminate(procs: Sequence[tuple[int, Path]], timeout: float) -> None:
    """SIGTERM (controlled shutdown), then SIGKILL whatever is left after timeout."""
    for pid, _ in procs:
        send_signal(pid, signal.SIGTERM)
        send_signal(pid, signal.SIGCONT)  # in case a fault test froze it with SIGSTOP
    left = wait_gone(procs, timeout)
    for pid, _ in left:
        send_signal(pid, signal.SIGKILL)
    left = wait_gone(left, 10.0)
    if left:
        raise BrokerError(
            f"Kafka node process(es) {[p for p, _ in left]} did not exit after SIGKILL"
        )


def launch(node: NodeInfo) -> subprocess.Popen[bytes]:
    """Start the node's command detached (own session), so it outlives this process."""
    (node.dir / "logs").mkdir(parents=True, exist_ok=True)
    with open(node.dir / "stdout.log", "ab") as out:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        out.write(f"{LAUNCH_HEADER} starting node {node.node_id} at {stamp} ===\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(node.command),
            cwd=node.dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc
