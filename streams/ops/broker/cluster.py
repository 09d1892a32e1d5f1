"""An embedded local Kafka (KRaft) cluster: jars from Maven Central, one JVM per node.

Layout on disk:

* ``<home>/kafka-<version>/lib``: the broker's jars, resolved once per machine by Maven
  (``streams/ops/broker/assets/pom.xml``); ``.complete`` in that folder marks a finished download.
* ``<run_dir>/cluster.json``: the state file (pids, ports, bootstrap servers, launch commands).
* ``<run_dir>/node-<i>/``: ``server.properties``, ``data/`` (log.dirs), ``logs/server.log``
  and ``stdout.log`` (JVM output such as crashes) for node ``i``.

Nodes are started detached (own session), so they outlive the process that started them; use
`stop_cluster` to stop them. Only processes whose command line is ``kafka.Kafka`` with this
run dir's ``server.properties`` are ever signalled.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import fcntl
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from aiokafka.conn import create_conn
from aiokafka.protocol.metadata import MetadataRequest

from streams.errors import ChorusError

__all__ = [
    "BrokerError",
    "ClusterInfo",
    "NodeInfo",
    "cluster_status",
    "ensure_kafka_jars",
    "free_port",
    "free_ports",
    "kill_node",
    "restart_node",
    "start_cluster",
    "stop_cluster",
]

_T = TypeVar("_T")

STATE_FILE = "cluster.json"
READY_LINE = "Kafka Server started"
MIN_JAVA = 17
MAVEN_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
_COMPLETE_MARKER = ".complete"
_LOG_TAIL_LINES = 30
_LAUNCH_HEADER = "=== chorus:"
_NO_BROKER_HINT = "or set CHORUS_BOOTSTRAP_SERVERS to use an existing cluster"

# Popen objects of nodes started by this process, so exited children are reaped (a zombie
# still answers kill(pid, 0)).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
_JAVA_CHECKED: set[str] = set()


class BrokerError(ChorusError):
    """The local broker could not be provisioned, started, or stopped."""


@dataclass(frozen=True)
class NodeInfo:
    node_id: int
    port: int
    controller_port: int
    pid: int | None  # None when the node's process is not running
    log_file: Path


@dataclass(frozen=True)
class ClusterInfo:
    run_dir: Path
    bootstrap_servers: str
    nodes: list[NodeInfo]


# --------------------------------------------------------------------------------------------
# Small helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    return free_ports(1)[0]


def free_ports(count: int, exclude: set[int] | None = None) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that are free right now, none in `exclude`.

    Ask for all the ports one process needs in one call: each is held bound until all are
    chosen, so the kernel cannot hand one out twice (separate free_port() calls can).
    """
    exclude = exclude or set()
    socks: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in exclude and port not in ports:
                ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def _port_free(port: int) -> bool:
    # SO_REUSEADDR like the JVM does, so TIME_WAIT leftovers of a stopped broker don't count.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _port_in_use_error(port: int) -> BrokerError:
    return BrokerError(
        f"port {port} is already in use (by the broker of another chorus checkout? each "
        f"checkout runs its own); stop whatever holds it or set CHORUS_BROKER_PORT for this "
        f"checkout (e.g. CHORUS_BROKER_PORT={port + 100}); to use the Kafka broker that is "
        f"there instead, set CHORUS_BOOTSTRAP_SERVERS=127.0.0.1:{port}, or give both "
        f"checkouts the same CHORUS_BROKER_HOME"
    )


def _new_cluster_id() -> str:
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _tail(text: str, lines: int = _LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _read_from(path: Path, offset: int = 0) -> str:
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(offset if offset <= size else 0)  # smaller: the log rolled over
            return fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _asset_text(name: str) -> str:
    return resources.files("streams.ops.broker").joinpath("assets", name).read_text("utf-8")


def _run_coro(factory: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """asyncio.run, also when called from inside a running event loop (via a worker thread)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: asyncio.run(factory())).result()


# --------------------------------------------------------------------------------------------
# Java and the jars


def _java_executable() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("java")


def _parse_java_major(output: str) -> int | None:
    m = re.search(r'version "([^"]+)"', output)
    if not m:
        return None
    parts = re.findall(r"\d+", m.group(1))
    if not parts:
        return None
    major = int(parts[0])
    if major == 1 and len(parts) > 1:  # "1.8.0_392" is Java 8
        major = int(parts[1])
    return major


def _check_java() -> str:
    """The java executable, after checking that it is Java 17 or newer."""
    java = _java_executable()
    if java is None:
        raise BrokerError(
            f"Java {MIN_JAVA}+ is required to run the local Kafka broker; found none on PATH "
            f"(or in JAVA_HOME). Install it (e.g. apt-get install openjdk-17-jre-headless) "
            f"{_NO_BROKER_HINT}."
        )
    if java in _JAVA_CHECKED:
        return java
    try:
        proc = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=60, check=False
        )
        output = (proc.stderr or "") + (proc.stdout or "")
    except (OSError, subprocess.TimeoutExpired) as exc:
        output = f"{java} -version failed: {exc}"
    major = _parse_java_major(output)
    if major is None or major < MIN_JAVA:
        first = output.strip().splitlines()[0] if output.strip() else "no version output"
        found = f"Java {major} ({first})" if major is not None else first
        raise BrokerError(
            f"Java {MIN_JAVA}+ is required to run the local Kafka broker; found {found} at "
            f"{java}. Install a newer JDK/JRE and put it first on PATH or in JAVA_HOME, "
            f"{_NO_BROKER_HINT}."
        )
    _JAVA_CHECKED.add(java)
    return java


def _log4j_version(kafka_version: str) -> str:
    """The log4j2 version Kafka itself was built with (gradle/dependencies.gradle)."""
    nums = [int(x) for x in re.findall(r"\d+", kafka_version)[:2]]
    major, minor = [*nums, 0, 0][:2]
    return "2.24.3" if (major, minor) < (4, 2) else "2.25.3"


def ensure_kafka_jars(home: Path, kafka_version: str) -> Path:
    """Resolve the broker jars (once per machine and version) and return their lib folder.

    Checks Java 17+ first. Maven is only needed (and checked) when the jars are not cached.
    Concurrent callers are serialised by a file lock; the download goes to a temp folder that
    is renamed into place, so a half download is never used.
    """
    _check_java()
    home = Path(home).expanduser()
    dest = home / f"kafka-{kafka_version}"
    lib = dest / "lib"
    if (dest / _COMPLETE_MARKER).is_file() and lib.is_dir():
        return lib

    with _file_lock(home / f".kafka-{kafka_version}.lock"):
        if (dest / _COMPLETE_MARKER).is_file() and lib.is_dir():
            return lib  # another process finished it while we waited
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError(
                f"Maven (mvn) is required to download the Kafka {kafka_version} jars for the "
                f"local broker (once; they are cached in {dest}); install it with "
                f"apt-get install maven {_NO_BROKER_HINT}."
            )
        tmp = Path(tempfile.mkdtemp(prefix=f".kafka-{kafka_version}-", dir=home))
        try:
            pom = tmp / "pom.xml"
            pom.write_text(_asset_text("pom.xml"), "utf-8")
            cmd = [
                mvn,
                "-B",
                "-q",
                "-f",
                str(pom),
                f"{MAVEN_DEPENDENCY_PLUGIN}:copy-dependencies",
                f"-DoutputDirectory={tmp / 'lib'}",
                "-DincludeScope=runtime",
                f"-Dkafka.version={kafka_version}",
                f"-Dlog4j.version={_log4j_version(kafka_version)}",
            ]
            try:
                proc = subprocess.run(
                    cmd,
                    cwd=tmp,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=1800,
                    check=False,
                )
                output, rc = proc.stdout or "", proc.returncode
            except subprocess.TimeoutExpired as exc:
                out = exc.stdout
                output = out.decode("utf-8", "replace") if isinstance(out, bytes) else out or ""
                rc = -1
            except OSError as exc:
                output, rc = str(exc), -1
            main_jar = tmp / "lib" / f"kafka_2.13-{kafka_version}.jar"
            if rc != 0 or not main_jar.is_file():
                why = f"mvn exited with code {rc}" if rc != 0 else f"{main_jar.name} is missing"
                raise BrokerError(
                    f"the Kafka {kafka_version} jars could not be resolved from Maven Central "
                    f"({why}). Check network access to repo.maven.apache.org (or the mirror in "
                    f"~/.m2/settings.xml) and that Kafka {kafka_version} exists, "
                    f"{_NO_BROKER_HINT}.\nCommand: {' '.join(cmd)}\n"
                    f"Last lines of Maven's output:\n{_tail(output) or '(none)'}"
                )
            jars = sorted(p.name for p in (tmp / "lib").glob("*.jar"))
            (tmp / _COMPLETE_MARKER).write_text(
                json.dumps({"kafka_version": kafka_version, "jars": jars, "at": time.time()}),
                "utf-8",
            )
            if dest.exists():  # an unfinished leftover (no marker): replace it
                shutil.rmtree(dest)
            os.rename(tmp, dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return lib


# --------------------------------------------------------------------------------------------
# Processes


def _cmdline(pid: int) -> list[str] | None:
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


def _pid_running(pid: int) -> bool:
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


def _is_our_node(pid: int | None, config: Path) -> bool:
    """True when pid is alive and runs kafka.Kafka with this node's server.properties."""
    if pid is None or pid <= 0 or not _pid_running(pid):
        return False
    args = _cmdline(pid)
    if not args:
        return False
    return "kafka.Kafka" in args and str(config) in args


def _still_exiting_or_ours(pid: int, config: Path) -> bool:
    # A dying process loses its cmdline before it closes its sockets: count it as alive.
    if not _pid_running(pid):
        return False
    args = _cmdline(pid)
    return not args or ("kafka.Kafka" in args and str(config) in args)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_gone(procs: Sequence[tuple[int, Path]], timeout: float) -> list[tuple[int, Path]]:
    """Wait until the processes exit; return those still running after timeout."""
    deadline = time.monotonic() + timeout
    alive = list(procs)
    while alive:
        alive = [(pid, cfg) for pid, cfg in alive if _still_exiting_or_ours(pid, cfg)]
        if not alive or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return alive


def _terminate(procs: Sequence[tuple[int, Path]], timeout: float) -> None:
    """SIGTERM (controlled shutdown), then SIGKILL whatever is left after timeout."""
    for pid, _ in procs:
        _signal(pid, signal.SIGTERM)
        _signal(pid, signal.SIGCONT)  # in case a fault test froze it with SIGSTOP
    left = _wait_gone(procs, timeout)
    for pid, _ in left:
        _signal(pid, signal.SIGKILL)
    left = _wait_gone(left, 10.0)
    if left:
        raise BrokerError(
            f"Kafka node process(es) {[p for p, _ in left]} did not exit after SIGKILL"
        )


# --------------------------------------------------------------------------------------------
# State file


def _state_path(run_dir: Path) -> Path:
    return Path(run_dir) / STATE_FILE


def _load_state(run_dir: Path) -> dict[str, Any] | None:
    path = _state_path(run_dir)
    try:
        data = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BrokerError(
            f"{path} is unreadable ({exc}); stop any Kafka started from {run_dir} by hand "
            f"and delete the file"
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise BrokerError(f"{path} is not a chorus cluster state file; delete it")
    return data


def _save_state(run_dir: Path, state: dict[str, Any]) -> None:
    path = _state_path(run_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n", "utf-8")
    os.replace(tmp, path)


def _node_config(node: dict[str, Any]) -> Path:
    return Path(node["config"])


def _live_pid(node: dict[str, Any]) -> int | None:
    pid = node.get("pid")
    if isinstance(pid, int) and _is_our_node(pid, _node_config(node)):
        return pid
    return None


def _info_from_state(run_dir: Path, state: dict[str, Any]) -> ClusterInfo:
    nodes = [
        NodeInfo(
            node_id=int(n["node_id"]),
            port=int(n["port"]),
            controller_port=int(n["controller_port"]),
            pid=_live_pid(n),
            log_file=Path(n["log_file"]),
        )
        for n in state["nodes"]
    ]
    return ClusterInfo(
        run_dir=Path(run_dir), bootstrap_servers=str(state["bootstrap_servers"]), nodes=nodes
    )


def _find_node(state: dict[str, Any], node_id: int) -> dict[str, Any]:
    for node in state["nodes"]:
        if int(node["node_id"]) == node_id:
            return dict(node)
    ids = [int(n["node_id"]) for n in state["nodes"]]
    raise BrokerError(f"no node {node_id} in this cluster (nodes: {ids})")


# --------------------------------------------------------------------------------------------
# Configuration


def _server_properties(
    *,
    node_id: int,
    port: int,
    controller_port: int,
    voters: str,
    data_dir: Path,
    nodes: int,
) -> str:
    rf = min(nodes, 3)
    min_isr = 2 if nodes >= 3 else 1
    internal_partitions = 1 if nodes == 1 else 3
    props: dict[str, str | int] = {
        "process.roles": "broker,controller",
        "node.id": node_id,
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": 1,
        "default.replication.factor": rf,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": internal_partitions,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": internal_partitions,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
        "num.network.threads": 2,
        "num.io.threads": 4,
    }
    if nodes > 1:
        props.update(
            {
                "unclean.leader.election.enable": "false",
                "broker.heartbeat.interval.ms": 500,
                "broker.session.timeout.ms": 4000,
            }
        )
    lines = [f"# Written by chorus (streams/broker.py); node {node_id} of {nodes}."]
    lines += [f"{k}={v}" for k, v in props.items()]
    return "\n".join(lines) + "\n"


def _choose_ports(
    nodes: int, base_port: int, previous: dict[str, Any] | None
) -> list[tuple[int, int]]:
    """(broker port, controller port) per node.

    base_port > 0: node i (1-based) listens on base_port + 2*(i-1) and these must be free;
    its controller prefers the next port up, else any free port.
    base_port == 0: any free ports, reusing the previous run's ports when still free.
    """
    chosen: set[int] = set()
    result: list[tuple[int, int]] = []
    old = {}
    if previous is not None and len(previous["nodes"]) == nodes:
        old = {int(n["node_id"]): n for n in previous["nodes"]}
    for i in range(1, nodes + 1):
        if base_port > 0:
            port = base_port + 2 * (i - 1)
            if not _port_free(port):
                raise _port_in_use_error(port)
            preferred = port + 1
        else:
            prev = old.get(i)
            prev_port = int(prev["port"]) if prev else 0
            if prev_port and prev_port not in chosen and _port_free(prev_port):
                port = prev_port
            else:
                port = free_ports(1, chosen)[0]
            preferred = int(prev["controller_port"]) if prev else 0
        chosen.add(port)
        if preferred and preferred not in chosen and _port_free(preferred):
            cport = preferred
        else:
            cport = free_ports(1, chosen)[0]
        chosen.add(cport)
        result.append((port, cport))
    return result


def _read_cluster_id(data_dir: Path) -> str | None:
    meta = data_dir / "meta.properties"
    try:
        text = meta.read_text("utf-8")
    except FileNotFoundError:
        return None
    m = re.search(r"^cluster\.id=(\S+)", text, re.M)
    return m.group(1) if m else None


def _format_storage(
    java: str, lib: Path, cluster_id: str, nodes: list[dict[str, Any]], timeout: float
) -> None:
    procs: list[tuple[dict[str, Any], subprocess.Popen[str]]] = []
    for node in nodes:
        cmd = [
            java,
            "-Xmx256m",
            "-cp",
            f"{lib}/*",
            "kafka.tools.StorageTool",
            "format",
            # One random id in 64 starts with "-", which "-t <id>" would read as an option.
            f"--cluster-id={cluster_id}",
            "-c",
            node["config"],
        ]
        procs.append(
            (
                node,
                subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
            )
        )
    errors: list[str] = []
    for node, proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            errors.append(f"node {node['node_id']}: timed out\n{_tail(out or '')}")
            continue
        if proc.returncode != 0:
            errors.append(
                f"node {node['node_id']}: exit code {proc.returncode}\n{_tail(out or '')}"
            )
    if errors:
        raise BrokerError(
            "formatting the Kafka storage failed (kafka.tools.StorageTool format); "
            "delete the run dir to start from scratch if its data is disposable.\n"
            + "\n".join(errors)
        )


def _launch(node: dict[str, Any]) -> subprocess.Popen[bytes]:
    node_dir = Path(node["dir"])
    (node_dir / "logs").mkdir(parents=True, exist_ok=True)
    with open(node_dir / "stdout.log", "ab") as out:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        out.write(f"{_LAUNCH_HEADER} starting node {node['node_id']} at {stamp} ===\n".encode())
        out.flush()
        proc = subprocess.Popen(
            node["command"],
            cwd=node_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc


# --------------------------------------------------------------------------------------------
# Readiness


async def _metadata_brokers(port: int, timeout: float) -> int:
    """Number of brokers in a real Metadata response from the node at 127.0.0.1:port."""
    conn = await asyncio.wait_for(
        create_conn("127.0.0.1", port, request_timeout_ms=int(timeout * 1000)), timeout
    )
    try:
        response = await asyncio.wait_for(conn.send(MetadataRequest([])), timeout)
        return len(response.brokers)
    finally:
        conn.close()


async def _probe_all(ports: list[int], timeout: float) -> list[int | str]:
    async def one(port: int) -> int | str:
        try:
            return await _metadata_brokers(port, timeout)
        except Exception as exc:  # not ready yet: any failure is retried
            return f"{type(exc).__name__}: {exc}"

    return list(await asyncio.gather(*(one(p) for p in ports)))


def _log_tail_for(node: dict[str, Any], offset: int) -> str:
    parts = []
    log = _read_from(Path(node["log_file"]), offset)
    parts.append(f"--- {node['log_file']} (last {_LOG_TAIL_LINES} lines) ---\n{_tail(log)}")
    stdout = Path(node["dir"]) / "stdout.log"
    out = _read_from(stdout).rsplit(_LAUNCH_HEADER, 1)[-1].split("\n", 1)[-1]
    if out.strip():  # the JVM's own output since the last launch (crashes, bad options)
        parts.append(f"--- {stdout} ---\n{_tail(out, 15)}")
    return "\n".join(parts)


def _wait_ready(
    starting: list[tuple[dict[str, Any], subprocess.Popen[bytes], int]],
    probe_ports: list[int],
    expected_brokers: int,
    timeout: float,
) -> None:
    """Wait until each started node logged READY_LINE and every probed node answers Metadata
    listing expected_brokers brokers. starting: (node, process, log offset at launch)."""
    deadline = time.monotonic() + timeout
    logged: set[int] = set()
    last_probe: list[int | str] = []
    while True:
        for node, proc, offset in starting:
            rc = proc.poll()
            if rc is not None:
                raise BrokerError(
                    f"Kafka node {node['node_id']} exited during startup with code {rc}.\n"
                    f"{_log_tail_for(node, offset)}"
                )
            if proc.pid not in logged and READY_LINE in _read_from(Path(node["log_file"]), offset):
                logged.add(proc.pid)
        if len(logged) == len(starting):
            probe_timeout = min(5.0, max(deadline - time.monotonic(), 0.5))
            last_probe = _run_coro(functools.partial(_probe_all, probe_ports, probe_timeout))
            if all(r == expected_brokers for r in last_probe):
                return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    waiting = [n for n, p, _ in starting if p.pid not in logged] or [n for n, _, _ in starting]
    if len(logged) == len(starting):
        detail = ", ".join(
            f"127.0.0.1:{port}: {r if isinstance(r, str) else f'{r} broker(s)'}"
            for port, r in zip(probe_ports, last_probe, strict=False)
        )
        why = (
            f"the nodes logged '{READY_LINE}' but Metadata did not list {expected_brokers} "
            f"broker(s) ({detail})"
        )
    else:
        why = f"node(s) {[n['node_id'] for n in waiting]} never logged '{READY_LINE}'"
    offsets = {n["node_id"]: off for n, _, off in starting}
    tails = "\n".join(_log_tail_for(n, offsets[n["node_id"]]) for n in waiting)
    raise BrokerError(
        f"the local Kafka cluster was not ready after {timeout:g}s: {why}. "
        f"Raise CHORUS_BROKER_START_TIMEOUT if the machine is just slow.\n{tails}"
    )


# --------------------------------------------------------------------------------------------
# Public API


def cluster_status(run_dir: Path) -> ClusterInfo | None:
    """The cluster described by run_dir/cluster.json, or None if none of its nodes runs.

    Nodes that are not running have pid None.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    state = _load_state(run_dir)
    if state is None:
        return None
    info = _info_from_state(run_dir, state)
    if all(n.pid is None for n in info.nodes):
        return None
    return info


def start_cluster(
    *,
    home: Path,
    run_dir: Path,
    nodes: int = 1,
    base_port: int = 9092,
    kafka_version: str,
    timeout: float = 60.0,
) -> ClusterInfo:
    """Start (or find already running) a local KRaft cluster of `nodes` combined nodes.

    Node i listens on 127.0.0.1:base_port+2*(i-1) (base_port=0: any free ports); controller
    ports are picked free. Existing data in run_dir is kept (storage is formatted only once).
    If run_dir's cluster is already running this returns it; if some of its nodes are down
    they are restarted. Returns once every node answers a Metadata request listing all nodes.
    """
    if nodes < 1:
        raise BrokerError(f"nodes must be at least 1, not {nodes}")
    if base_port < 0 or base_port + 2 * nodes > 65535:
        raise BrokerError(f"base_port {base_port} is out of range")
    run_dir = Path(run_dir).expanduser().resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    with _file_lock(run_dir / ".cluster.lock"):
        state = _load_state(run_dir)
        if state is not None:
            live = {int(n["node_id"]): _live_pid(n) for n in state["nodes"]}
            if any(pid is not None for pid in live.values()):
                if len(state["nodes"]) != nodes:
                    raise BrokerError(
                        f"a {len(state['nodes'])}-node cluster is already running from "
                        f"{run_dir}; stop it first (chorus broker stop) to start {nodes} node(s)"
                    )
                down = [nid for nid, pid in live.items() if pid is None]
                if not down:
                    return _info_from_state(run_dir, state)
                for nid in down:
                    _restart_locked(run_dir, state, nid, timeout)
                    state = _load_state(run_dir) or state
                return _info_from_state(run_dir, state)

        ports = _choose_ports(nodes, base_port, state)
        java = _check_java()
        lib = ensure_kafka_jars(Path(home), kafka_version)
        return _start_new(run_dir, java, lib, kafka_version, nodes, ports, state, timeout)


def _start_new(
    run_dir: Path,
    java: str,
    lib: Path,
    kafka_version: str,
    nodes: int,
    ports: list[tuple[int, int]],
    previous: dict[str, Any] | None,
    timeout: float,
) -> ClusterInfo:
    # Existing data decides the cluster id; it must match the requested shape.
    formatted = sorted(
        int(p.parent.parent.name.split("-", 1)[1])
        for p in run_dir.glob("node-*/data/meta.properties")
        if p.parent.parent.name.split("-", 1)[1].isdigit()
    )
    if formatted and (max(formatted) > nodes or (previous and len(previous["nodes"]) != nodes)):
        raise BrokerError(
            f"{run_dir} holds the data of a cluster with nodes {formatted}, not {nodes}; "
            f"start it with the same number of nodes, or delete {run_dir} to start empty"
        )
    cluster_id = None
    for nid in formatted:
        cluster_id = _read_cluster_id(run_dir / f"node-{nid}" / "data")
        if cluster_id:
            break
    cluster_id = cluster_id or (previous or {}).get("cluster_id") or _new_cluster_id()

    log4j = run_dir / "log4j2.properties"
    log4j.write_text(_asset_text("log4j2.properties"), "utf-8")
    heap = ["-Xms256m", "-Xmx512m"] if nodes == 1 else ["-Xms128m", "-Xmx384m"]
    voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports, start=1))
    node_states: list[dict[str, Any]] = []
    for i, (port, cport) in enumerate(ports, start=1):
        node_dir = run_dir / f"node-{i}"
        data_dir = node_dir / "data"
        logs_dir = node_dir / "logs"
        logs_dir.mkdir(parents=True, exist_ok=True)
        config = node_dir / "server.properties"
        config.write_text(
            _server_properties(
                node_id=i,
                port=port,
                controller_port=cport,
                voters=voters,
                data_dir=data_dir,
                nodes=nodes,
            ),
            "utf-8",
        )
        command = [
            java,
            *heap,
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={logs_dir}",
            f"-Dlog4j2.configurationFile={log4j}",
            "-cp",
            f"{lib}/*",
            "kafka.Kafka",
            str(config),
        ]
        node_states.append(
            {
                "node_id": i,
                "port": port,
                "controller_port": cport,
                "pid": None,
                "dir": str(node_dir),
                "config": str(config),
                "log_file": str(logs_dir / "server.log"),
                "command": command,
            }
        )

    to_format = [n for n in node_states if not (Path(n["dir"]) / "data/meta.properties").exists()]
    if to_format:
        _format_storage(java, lib, cluster_id, to_format, max(timeout, 120.0))

    state: dict[str, Any] = {
        "version": 1,
        "cluster_id": cluster_id,
        "kafka_version": kafka_version,
        "bootstrap_servers": ",".join(f"127.0.0.1:{p}" for p, _ in ports),
        "nodes": node_states,
    }
    starting: list[tuple[dict[str, Any], subprocess.Popen[bytes], int]] = []
    try:
        for node in node_states:
            offset = _file_size(Path(node["log_file"]))
            proc = _launch(node)
            node["pid"] = proc.pid
            starting.append((node, proc, offset))
        state["started_at"] = time.time()
        _save_state(run_dir, state)
        _wait_ready(starting, [p for p, _ in ports], nodes, timeout)
    except BaseException:
        _terminate([(p.pid, Path(n["config"])) for n, p, _ in starting], 10.0)
        for node in node_states:
            node["pid"] = None
        _save_state(run_dir, state)
        raise
    return _info_from_state(run_dir, state)


def stop_cluster(run_dir: Path, timeout: float = 20.0) -> bool:
    """Stop every running node of run_dir's cluster (SIGTERM, then SIGKILL after timeout).

    Returns False if nothing was running.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    if _load_state(run_dir) is None:
        return False
    with _file_lock(run_dir / ".cluster.lock"):
        state = _load_state(run_dir)
        if state is None:
            return False
        running = [
            (pid, _node_config(n)) for n in state["nodes"] if (pid := _live_pid(n)) is not None
        ]
        if running:
            _terminate(running, timeout)
        for node in state["nodes"]:
            node["pid"] = None
        _save_state(run_dir, state)
        return bool(running)


def kill_node(run_dir: Path, node_id: int, sig: int = signal.SIGKILL) -> bool:
    """Send sig to one node (for fault tests). Returns False if that node was not running.

    For SIGKILL/SIGTERM/SIGINT this waits (up to 60 s) until the process is gone. Other signals
    (e.g. SIGSTOP/SIGCONT to freeze a node) are just sent.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    with _file_lock(run_dir / ".cluster.lock"):
        state = _load_state(run_dir)
        if state is None:
            raise BrokerError(f"no cluster state in {run_dir}; start the cluster first")
        node = _find_node(state, node_id)
        pid = _live_pid(node)
        if pid is None:
            return False
        os.kill(pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            if _wait_gone([(pid, _node_config(node))], 60.0):
                raise BrokerError(f"node {node_id} (pid {pid}) did not exit after signal {sig}")
            for n in state["nodes"]:
                if int(n["node_id"]) == node_id:
                    n["pid"] = None
            _save_state(run_dir, state)
        return True


def restart_node(run_dir: Path, node_id: int, timeout: float = 60.0) -> ClusterInfo:
    """Start a stopped node again with its previous config and data; no-op if it runs.

    Returns once it logged startup and every running node's Metadata lists all running nodes.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    with _file_lock(run_dir / ".cluster.lock"):
        state = _load_state(run_dir)
        if state is None:
            raise BrokerError(f"no cluster state in {run_dir}; start the cluster first")
        _restart_locked(run_dir, state, node_id, timeout)
        return _info_from_state(run_dir, _load_state(run_dir) or state)


def _restart_locked(run_dir: Path, state: dict[str, Any], node_id: int, timeout: float) -> None:
    node = _find_node(state, node_id)
    if _live_pid(node) is not None:
        return
    port = int(node["port"])
    port_deadline = time.monotonic() + 5.0
    while not _port_free(port):
        if time.monotonic() >= port_deadline:
            raise _port_in_use_error(port)
        time.sleep(0.1)
    _check_java()
    offset = _file_size(Path(node["log_file"]))
    proc = _launch(node)
    for n in state["nodes"]:
        if int(n["node_id"]) == node_id:
            n["pid"] = proc.pid
    _save_state(run_dir, state)
    # The new process may not look like a Kafka node yet (its command line appears after
    # exec); counting it by pid would wait for too few brokers while the others list it.
    running = [
        n for n in state["nodes"] if int(n["node_id"]) == node_id or _live_pid(n) is not None
    ]
    node["pid"] = proc.pid
    try:
        _wait_ready(
            [(node, proc, offset)], [int(n["port"]) for n in running], len(running), timeout
        )
    except BaseException:
        _terminate([(proc.pid, _node_config(node))], 10.0)
        for n in state["nodes"]:
            if int(n["node_id"]) == node_id:
                n["pid"] = None
        _save_state(run_dir, state)
        raise
