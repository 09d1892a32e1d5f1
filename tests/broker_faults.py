"""Killing and restarting single nodes of a local cluster, for the broker and fault tests."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from streams.ops.broker import BrokerError, ClusterInfo
from streams.ops.broker.lifecycle import cluster_info, cluster_lock, restart_stopped_node
from streams.ops.broker.process import live_pid, wait_gone
from streams.ops.broker.state import ClusterState, load_state, save_state

_STOPPING_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)
_EXIT_WAIT_SECONDS = 60.0


def _state_of(run_dir: Path) -> ClusterState:
    state = load_state(run_dir)
    if state is None:
        raise BrokerError(f"no cluster state in {run_dir}; start the cluster first")
    return state


def kill_node(run_dir: Path, node_id: int, sig: int = signal.SIGKILL) -> bool:
    """Send sig to one node. Returns False if that node was not running.

    For SIGKILL/SIGTERM/SIGINT this waits (up to 60 s) until the process is gone. Other signals
    (e.g. SIGSTOP/SIGCONT to freeze a node) are just sent.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    with cluster_lock(run_dir):
        state = _state_of(run_dir)
        node = state.node(node_id)
        pid = live_pid(node)
        if pid is None:
            return False
        os.kill(pid, sig)
        if sig in _STOPPING_SIGNALS:
            if wait_gone([(pid, node.config)], _EXIT_WAIT_SECONDS):
                raise BrokerError(f"node {node_id} (pid {pid}) did not exit after signal {sig}")
            save_state(run_dir, state.with_pid(node_id, None))
        return True


def restart_node(run_dir: Path, node_id: int, timeout: float = 60.0) -> ClusterInfo:
    """Start a stopped node again with its previous config and data; no-op if it runs.

    Returns once it logged startup and every running node's Metadata lists all running nodes.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    with cluster_lock(run_dir):
        state = restart_stopped_node(run_dir, _state_of(run_dir), node_id, timeout)
        return cluster_info(run_dir, state)
