"""The embedded PostgreSQL server (``pgserver``): started into a data folder, left and stopped.

Every process that starts or joins the server is in pgserver's list of its processes
(``<data_dir>/pg/.handle_pids.json``); the last one to leave (at exit) stops it. Here a process
killed with SIGKILL, which never leaves, is dropped from that list by the next one that joins, so
the server it left running is reused and stops in time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def start_server(data_dir: Path) -> str:
    """Start (or join) the embedded PostgreSQL server that keeps its data in ``data_dir``; its URI.

    pgserver stops the server when the last process that joined it leaves (at exit). A process
    killed with SIGKILL never leaves, so its handle is dropped here first: the server left running
    is reused, and stops when the last live process leaves. SIGTERM exits through the same path
    (unless the process handles SIGTERM itself)."""
    import pgserver  # the wheel carries the server binaries; import only when it is used

    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    fresh = not (data_dir / "pg" / "PG_VERSION").exists()
    drop_dead_handles(data_dir / "pg")
    _exit_on_sigterm()
    saved = {key: os.environ.get(key) for key in ("LC_ALL", "LC_CTYPE")}
    if fresh:  # initdb takes its locale from the environment; a C ctype breaks Chinese trigrams
        os.environ.update(LC_ALL="C.UTF-8", LC_CTYPE="C.UTF-8")
    try:
        server = pgserver.get_server(data_dir / "pg")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return str(server.get_uri())


def drop_dead_handles(pg: Path) -> list[int]:
    """Remove the processes that are gone from the server's list of joined processes (pgserver's
    ``.handle_pids.json``). Returns the pids removed."""
    import pgserver.postgres_server as pgs
    import psutil

    handles = pg / ".handle_pids.json"
    if not handles.exists():
        return []
    with pgs.PostgresServer._lock:
        try:
            pids = pgs.DiskList(handles).get()
        except ValueError:  # a process killed while writing it left it cut short
            log.warning("embedded PostgreSQL in %s: its list of joined processes was unreadable; "
                        "it is emptied (the server then stops only when asked to)", pg)
            pgs.DiskList(handles).put([])
            return []
        live = [pid for pid in pids if _running(pid, psutil)]
        if live != pids:
            pgs.DiskList(handles).put(live)
    dead = [pid for pid in pids if pid not in live]
    if dead:
        log.warning("embedded PostgreSQL in %s: processes %s died without leaving it; it stops when "
                    "the last live process leaves", pg, ", ".join(map(str, dead)))
    return dead


def _running(pid: int, psutil: Any) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _exit_on_sigterm() -> None:
    """SIGTERM as a normal exit (atexit runs, so the embedded server is left or stopped), where
    the process kept the default action."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _sigterm_exit)


def _sigterm_exit(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)


def release_embedded(data_dir: Path) -> None:
    """Leave the embedded server of ``data_dir`` now, as this process would at exit (it stops
    when no other live process is in it): for an exit that skips :mod:`atexit`."""
    import pgserver.postgres_server as pgs

    pg = Path(data_dir).resolve() / "pg"
    server = pgs.PostgresServer._instances.get(pg)
    if server is not None:
        drop_dead_handles(pg)
        server.cleanup()


def stop_embedded(data_dir: Path, wait: float = 10.0) -> bool:
    """Leave the embedded server of ``data_dir`` and stop it, even if another process is still in
    it, and wait up to ``wait`` seconds for it to exit. False when none was running."""
    import pgserver.postgres_server as pgs
    import psutil

    pg = Path(data_dir).resolve() / "pg"
    pid_file = pg / "postmaster.pid"
    if not pid_file.exists():
        return False
    drop_dead_handles(pg)
    server = pgs.PostgresServer._instances.get(pg)
    if server is not None:  # this process's handle: stops it if it was the last one
        server.cleanup()
    with contextlib.suppress(OSError, ValueError, psutil.Error):  # unless that stopped it already
        postmaster = psutil.Process(int(pid_file.read_text().split("\n", 1)[0]))
        if postmaster.name() == "postgres":  # not a process that took a stale file's pid
            postmaster.send_signal(signal.SIGINT)  # a server already stopping just goes on
            postmaster.wait(wait)
    return True


def embedded_postmasters(under: Path) -> list[Any]:
    """The embedded PostgreSQL servers (``psutil.Process``) whose data folder is inside ``under``."""
    import psutil

    root, found = Path(under).resolve(), []
    for process in psutil.process_iter(["name", "cmdline"]):
        command = process.info.get("cmdline") or []
        if process.info.get("name") == "postgres" and "-D" in command[:-1]:
            folder = Path(command[command.index("-D") + 1])
            if folder.is_absolute() and folder.is_relative_to(root):
                found.append(process)
    return found
