"""A one-node KRaft broker with TLS (a throwaway self-signed CA) and SASL/SCRAM listeners.

streams.ops.broker only starts PLAINTEXT clusters, so the security tests write their own
server.properties, add SCRAM users at format time (StorageTool --add-scram) and run the
same jars (streams.ops.broker.ensure_kafka_jars). Everything binds to 127.0.0.1.

Listeners: SASL_SSL (SCRAM over TLS), SSL (TLS only), SASL_PLAINTEXT (SCRAM only), plus a
PLAINTEXT one for the broker's own inter-broker traffic and the controller.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from streams.ops.broker import READY_LINE, ensure_kafka_jars, free_ports
from streams.settings import Settings

LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
"""


@dataclass
class SecureBroker:
    run_dir: Path
    ca_file: Path
    user: str
    password: str
    sasl_ssl: str  # bootstrap addresses per listener
    ssl: str
    sasl_plaintext: str
    process: subprocess.Popen[bytes] | None = None

    @property
    def log_file(self) -> Path:
        return self.run_dir / "logs" / "server.log"

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


def _run(command: list[str], cwd: Path, timeout: float = 120.0) -> None:
    result = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({result.returncode}):\n{result.stderr[-2000:]}")


def make_certificates(directory: Path, store_password: str) -> tuple[Path, Path]:
    """A self-signed CA and a server certificate for 127.0.0.1/localhost signed by it.

    Returns (CA certificate PEM, server PKCS12 keystore).
    """
    directory.mkdir(parents=True, exist_ok=True)
    days = "2"
    _run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", days,
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=chorus-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ],
        directory,
    )  # fmt: skip
    _run(
        [
            "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key",
            "-out", "server.csr", "-subj", "/CN=127.0.0.1",
        ],
        directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "basicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _run(
        [
            "openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", days, "-extfile", "server.ext",
        ],
        directory,
    )  # fmt: skip
    _run(
        [
            "openssl", "pkcs12", "-export", "-in", "server.crt", "-inkey", "server.key",
            "-certfile", "ca.crt", "-name", "broker", "-out", "broker.p12",
            "-passout", f"pass:{store_password}",
        ],
        directory,
    )  # fmt: skip
    return directory / "ca.crt", directory / "broker.p12"


def start_secure_broker(run_dir: Path, timeout: float = 180.0) -> SecureBroker:
    settings = Settings()
    lib = ensure_kafka_jars(settings.broker_home, settings.kafka_version)
    java = "java"
    run_dir.mkdir(parents=True, exist_ok=True)
    store_password = uuid.uuid4().hex
    ca_file, keystore = make_certificates(run_dir / "tls", store_password)
    user, password = "alice", f"scram-{uuid.uuid4().hex}"
    internal, controller, sasl_ssl, ssl, sasl_plain = free_ports(5)
    data = run_dir / "data"
    listeners = {
        "INTERNAL": internal,
        "CONTROLLER": controller,
        "SASL_SSL": sasl_ssl,
        "SSL": ssl,
        "SASL_PLAINTEXT": sasl_plain,
    }
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in listeners.items()),
        "advertised.listeners": ",".join(
            f"{name}://127.0.0.1:{port}" for name, port in listeners.items() if name != "CONTROLLER"
        ),
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT,"
        "SASL_SSL:SASL_SSL,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "controller.listener.names": "CONTROLLER",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(keystore),
        "ssl.keystore.password": store_password,
        "ssl.key.password": store_password,
        "ssl.client.auth": "none",
        "log.dirs": str(data),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "num.network.threads": "2",
        "num.io.threads": "2",
    }
    config = run_dir / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    (run_dir / "log4j2.properties").write_text(LOG4J)
    (run_dir / "logs").mkdir(exist_ok=True)
    cluster_id = "cHJvdGVjdGVkLWJyb2tlcg"  # any 22-character base64 id
    _run(
        [
            java, "-Xmx256m", "-cp", f"{lib}/*", "kafka.tools.StorageTool", "format",
            "-t", cluster_id, "-c", str(config),
            "--add-scram", f"SCRAM-SHA-256=[name={user},password={password}]",
            "--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]",
        ],
        run_dir,
    )  # fmt: skip
    broker = SecureBroker(
        run_dir=run_dir,
        ca_file=ca_file,
        user=user,
        password=password,
        sasl_ssl=f"127.0.0.1:{sasl_ssl}",
        ssl=f"127.0.0.1:{ssl}",
        sasl_plaintext=f"127.0.0.1:{sasl_plain}",
    )
    with (run_dir / "stdout.log").open("ab") as out:
        broker.process = subprocess.Popen(
            [
                java, "-Xms128m", "-Xmx384m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dkafka.logs.dir={run_dir / 'logs'}",
                f"-Dlog4j2.configurationFile={run_dir / 'log4j2.properties'}",
                "-cp", f"{lib}/*", "kafka.Kafka", str(config),
            ],
            cwd=run_dir,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker.process.poll() is not None:
            raise RuntimeError(
                f"secure broker exited ({broker.process.returncode}):\n"
                + (run_dir / "stdout.log").read_text(errors="replace")[-3000:]
                + broker.log_file.read_text(errors="replace")[-3000:]
            )
        if broker.log_file.exists() and READY_LINE in broker.log_file.read_text(errors="replace"):
            return broker
        time.sleep(0.3)
    broker.stop()
    raise TimeoutError(f"secure broker not ready in {timeout:g}s")
