"""The data folder's embedded broker: one address for good, one owner at a time.

A data folder's broker port is chosen once (below the kernel's ephemeral range, so no outgoing
connection takes it while the broker is down), kept in ``<data_dir>/kafka/port`` and reused by
whichever process starts the broker again. While it runs, ``<data_dir>/kafka/bootstrap`` names it
and the process that owns it (``<host:port> <broker pid> <owner pid>``): other processes join it,
and a broker whose owner is gone is an orphan, stopped by the next process that needs the broker.
The broker runs in ``<data_dir>/kafka`` (its working directory names its data folder), so an orphan
is found even without the file. :class:`infra.supervision.BrokerKeeper` restarts a broker that
died, or takes over one whose owner died.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.broker import EmbeddedBroker, ping, stable_port
from infra.settings import Settings

log = logging.getLogger(__name__)

#: ``<host:port> <broker pid> <owner pid>`` of a running embedded broker, for other processes.
ADDRESS_FILE = "bootstrap"
#: ``<host:port>``: the data folder's broker address, kept across restarts.
PORT_FILE = "port"


@dataclass(frozen=True)
class Running:
    """What ``<data_dir>/kafka/bootstrap`` says."""

    bootstrap: str
    pid: int
    owner: int | None

    def alive(self) -> bool:
        """The broker and its owner both run (a broker whose owner is gone is an orphan)."""
        return process_alive(self.pid) and (self.owner is None or process_alive(self.owner))


def broker_folder(settings: Settings, data_dir: Path | str | None = None) -> Path:
    return Path(data_dir if data_dir is not None else settings.data_dir).resolve() / "kafka"


def read_running(folder: Path) -> Running | None:
    try:
        fields = (folder / ADDRESS_FILE).read_text().split()
        owner = int(fields[2]) if len(fields) > 2 else None
        return Running(fields[0], int(fields[1]), owner)
    except (OSError, ValueError, IndexError):
        return None


def kept_port(folder: Path, host: str = "127.0.0.1") -> int:
    """The data folder's broker port: read from ``kafka/port``, else chosen now and kept there."""
    try:
        return int((folder / PORT_FILE).read_text().strip().rpartition(":")[2])
    except (OSError, ValueError):
        port = stable_port(host)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PORT_FILE).write_text(f"{host}:{port}\n")
        return port


def kafka_bootstrap(
    settings: Settings, data_dir: Path | str | None = None
) -> tuple[str, EmbeddedBroker | None]:
    """Where Kafka is, and the embedded broker this call started (the caller stops it), if any.

    ``settings.kafka_bootstrap`` when set. Otherwise the embedded broker of ``data_dir`` (default
    ``settings.data_dir``): joined when another live process runs it, else started here on the data
    folder's port (an orphan left by a killed process is stopped first), logging to
    ``<data_dir>/kafka/tansu.log``. A joined broker lives as long as the process that started it
    (:class:`infra.supervision.BrokerKeeper` takes over when that process is gone)."""
    if settings.kafka_bootstrap:
        return settings.kafka_bootstrap, None
    folder = broker_folder(settings, data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with folder_lock(folder):
        running = read_running(folder)
        if running is not None and running.alive() and ping(running.bootstrap, 3.0):
            log.info("joining the embedded Kafka broker at %s", running.bootstrap)
            return running.bootstrap, None
        broker = start_in_folder(folder)
        return broker.bootstrap, broker


def start_in_folder(folder: Path) -> EmbeddedBroker:
    """Start the data folder's broker on its kept port (call it holding :func:`folder_lock`)."""
    stop_orphans(folder)
    broker = EmbeddedBroker(folder, address_file=folder / ADDRESS_FILE)
    broker.start(kept_port(folder, broker.host))
    return broker


def embedded_brokers(under: Path) -> list[Any]:
    """The tansu processes (``psutil.Process``) whose working directory is ``under`` or inside it."""
    import psutil

    root, found = Path(under).resolve(), []
    for process in psutil.process_iter(["name", "cwd", "status"]):
        cwd = process.info.get("cwd")
        if (process.info.get("name") or "").startswith("tansu") and cwd and \
                process.info.get("status") != psutil.STATUS_ZOMBIE and Path(cwd).is_relative_to(root):
            found.append(process)
    return found


def stop_orphans(folder: Path) -> int:
    """Stop every tansu of this data folder (call it when none of them is in use): a process
    killed with SIGKILL leaves its broker behind. Returns how many were stopped."""
    import psutil

    orphans = [p for p in embedded_brokers(folder) if Path(p.info["cwd"]) == folder.resolve()]
    for process in orphans:
        log.warning("stopping an orphaned embedded Kafka broker of %s (pid %s)", folder, process.pid)
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(orphans, timeout=3)
    return len(orphans)


def process_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@contextlib.contextmanager
def folder_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on the data folder's broker, between processes (a no-op where ``fcntl``
    is missing)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


