"""HTTP worker processes: how ``palimpsest serve`` answers requests (DESIGN §9).

The serving process binds the HTTP socket, then starts ``api_workers`` children (``palimpsest
api-worker``), each inheriting the listening socket: the kernel hands every accepted connection to
one of them. None shares a GIL with the serving process's relays and background jobs. A worker
builds its own command side (with its own group commit), query side and key store from the serving
process's settings and serves REST, MCP and the console on that socket with uvicorn; the serving
process answers no request itself. Any worker answers any request: the query
side is stateless, a write is in the event store before it is answered, and a read that passes
``min_position`` waits until the read models hold that position, whichever worker wrote it.

What a worker keeps to itself: the read-your-writes overlay of search (a client keeping its
connection stays with one worker, and with its overlay; across connections ``min_position`` is the
guarantee; an erasure through another worker still reaches it: ``services.query.overlay_erasures``),
the route breakers and its caches. ``/metrics`` shows the breakers of the worker that
took the scrape and the latency histograms of every worker, summed
(``services.entrypoints.metrics``). MCP runs stateless (each request stands alone) and the
console's session key is the serving process's, so neither depends on which worker answers.

A worker that exits is started again with backoff (:class:`services.entrypoints.children.Child`);
a stop of ``serve`` stops every worker, requests under way finishing within the HTTP grace.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

from infra.settings import Settings
from services.entrypoints.children import Child
from services.entrypoints.http import HTTP_GRACE_SECONDS, HttpServer, bind, http_app

log = logging.getLogger(__name__)

#: What a worker writes to its ready pipe once uvicorn listens.
READY = b"ready\n"


class ApiWorkers:
    """``count`` HTTP worker processes on one socket bound to ``host:port`` here, kept up: the
    same surface as :class:`~services.entrypoints.http.HttpServer` (``url``, :meth:`start`,
    :meth:`request_stop`, :meth:`stop`)."""

    def __init__(self, settings: Settings, host: str, port: int, count: int,
                 mcp: bool = True) -> None:
        bound = bind(host, port)
        self.sock = socket.socket(fileno=above_stdio(bound.detach()))
        self.host = host
        self.port: int = self.sock.getsockname()[1]
        settings = settings.model_copy(update={"api_host": host, "api_port": self.port})
        fd = self.sock.fileno()
        args = ["--fd", str(fd), *([] if mcp else ["--no-mcp"])]
        self.workers = [Child(settings, None, None, "api-worker", f"HTTP worker {i + 1}",
                              max_backoff=10.0, args=args, pass_fds=[fd]) for i in range(count)]
        #: The workers' metric files (``services.entrypoints.metrics``), for this start only.
        self.metrics_dir = metrics_folder()
        for worker in self.workers:
            worker.env["PROMETHEUS_MULTIPROC_DIR"] = self.metrics_dir
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 120.0) -> None:
        """Start every worker and return once each one listens (RuntimeError when one exits or
        does not listen within ``timeout``); then keep them up on threads of their own."""
        pipes = []
        for worker in self.workers:
            read, write = os.pipe()
            write = above_stdio(write)
            try:
                worker.start(["--ready-fd", str(write)], pass_fds=[write])
            finally:
                os.close(write)
            pipes.append(read)
        try:
            self._wait_ready(pipes, time.monotonic() + timeout)
        finally:
            for read in pipes:
                os.close(read)
        for worker in self.workers:
            thread = threading.Thread(target=worker.supervise, args=(self._stop,),
                                      name=f"supervise {worker.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _wait_ready(self, pipes: list[int], deadline: float) -> None:
        waiting = dict(zip(pipes, self.workers, strict=True))
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{len(waiting)} HTTP worker(s) did not listen on {self.url} in time")
            readable, _, _ = select.select(list(waiting), [], [], min(left, 0.5))
            for read in readable:
                if os.read(read, len(READY)) != READY:  # closed unready: the worker exited
                    worker = waiting[read]
                    code = worker.process.wait() if worker.process is not None else None
                    raise RuntimeError(f"the {worker.name} exited while starting (code {code})")
                del waiting[read]

    def request_stop(self) -> None:
        """Ask every worker to stop (quick: safe in a signal handler)."""
        self._stop.set()
        for worker in self.workers:
            worker.terminate()

    def stop(self, timeout: float = HTTP_GRACE_SECONDS + 1.0) -> None:
        self.request_stop()
        for thread in self._threads:
            thread.join(timeout=1.0)
        for worker in self.workers:
            worker.stop(timeout)
        with contextlib.suppress(OSError):
            self.sock.close()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)


#: The metric folders' names: this prefix, then the serving process's pid.
_METRICS_PREFIX = "palimpsest-metrics-"


def metrics_folder() -> str:
    """A new folder for the workers' metric files, named after this process; the folders of
    serving processes that died without removing theirs (a SIGKILL) are removed first."""
    import psutil

    for stale in Path(tempfile.gettempdir()).glob(_METRICS_PREFIX + "*"):
        pid = stale.name.removeprefix(_METRICS_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{_METRICS_PREFIX}{os.getpid()}-")


def above_stdio(fd: int) -> int:
    """``fd``, or a copy of it numbered 3 or above (the original closed): a process started with
    a standard stream closed gets its lowest numbers for new files, and a descriptor handed to a
    child as 0, 1 or 2 would be taken for the child's own stream."""
    if fd > 2:
        return fd
    import fcntl

    copy = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return copy


# --- the worker process ----------------------------------------------------------------------


def run_api_worker(settings: Settings, fd: int, ready_fd: int | None = None,
                   mcp: bool = True) -> int:
    """``palimpsest api-worker``: serve on the inherited listening socket ``fd`` until SIGINT or
    SIGTERM (0), or until the server stops by itself (1: the parent starts another)."""
    from infra.processes import process_shutdown
    from services.bootstrap import build_services

    shutdown = process_shutdown("HTTP worker", settings)
    sock = socket.socket(fileno=fd)
    services = build_services(settings, http=True)  # the HTTP role: the request's tenant only
    host, port = settings.api_host, sock.getsockname()[1]
    server = HttpServer(lambda: http_app(services, host, port, mcp)[0], host, port, sock=sock)
    try:
        shutdown.on_stop(server.request_stop)
        server.start()
        _announce(ready_fd)
        while not shutdown.stop.wait(0.5):
            if not server.serving:
                log.error("HTTP worker %d: the server stopped by itself", os.getpid())
                return 1
        return 0
    finally:
        server.stop()
        services.close()
        shutdown.done()


def _announce(ready_fd: int | None) -> None:
    if ready_fd is None:
        return
    with contextlib.suppress(OSError):  # the parent stopped waiting: nothing to tell
        os.write(ready_fd, READY)
    with contextlib.suppress(OSError):
        os.close(ready_fd)
