"""The HTTP edge's server: the listening socket, uvicorn on a thread, and the application it serves.

:class:`HttpServer` serves on a socket bound when it is made (so a port in use fails before
anything else starts) or on one handed to it (an HTTP worker process of ``palimpsest serve``
inherits the socket its parent bound: :mod:`services.entrypoints.api_workers`).
:func:`http_app` builds what it serves: REST under ``/v1``, the console, and MCP mounted at
``/mcp`` with its session manager running inside the application's lifespan.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from services.bootstrap import Services

log = logging.getLogger(__name__)

#: Seconds uvicorn gives requests under way once a stop is asked.
HTTP_GRACE_SECONDS = 1


class CannotListenError(OSError):
    """The HTTP socket cannot be bound: its message names the address and what to pass instead."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one); :class:`CannotListenError`
    when the port is taken or not this user's, or the address not this machine's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        refused = CannotListenError(why_not(host, port, error))
        refused.errno = error.errno
        raise refused from error
    sock.set_inheritable(False)
    return sock


def why_not(host: str, port: int, error: OSError) -> str:
    """What a user reads when ``host:port`` cannot be listened on, and what to pass instead."""
    if error.errno == errno.EADDRINUSE:
        return (f"port {port} on {host} is already in use (another palimpsest serve?): pass "
                "--port with a free one, or --port 0 for any free port (the default: "
                "PALIMPSEST_API_PORT)")
    if error.errno == errno.EACCES:
        return (f"port {port} on {host} is not this user's to listen on (below 1024?): pass "
                "--port with another one")
    if error.errno == errno.EADDRNOTAVAIL:
        return f"{host} is no address of this machine: pass --host, e.g. 127.0.0.1"
    return f"cannot listen on {host}:{port}: {error.strerror or error}"


class HttpServer:
    """uvicorn on a thread of this process, on a socket bound when it is made; an app that stops
    by itself is built again (``make_app()``) and served on the same port, with backoff."""

    def __init__(self, make_app: Callable[[], Any], host: str, port: int,
                 max_backoff: float = 10.0, sock: socket.socket | None = None) -> None:
        self.make_app = make_app
        self.host = host
        #: Whether the socket was handed over: uvicorn then serves it once, and a server that
        #: stops by itself is not started again here (its process exits; its parent starts
        #: another, which inherits the socket afresh).
        self.inherited = sock is not None
        self.sock: socket.socket | None = sock if sock is not None else bind(host, port)
        self.port: int = self.sock.getsockname()[1]
        self.max_backoff = max_backoff
        self.restarts = 0
        self._stop = threading.Event()
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Serve from a thread; return once uvicorn listens (RuntimeError if it cannot start)."""
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not (self._server is not None and self._server.started):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server did not start on {self.url}")
            time.sleep(0.05)

    def _run(self) -> None:
        import uvicorn

        backoff = 1.0
        while not self._stop.is_set():
            sock = self.sock or self._rebind()
            if sock is None:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff)
                continue
            self.sock = None  # uvicorn closes it when it stops
            config = uvicorn.Config(self.make_app(), log_config=None, access_log=False,
                                    log_level="warning", lifespan="on",
                                    timeout_graceful_shutdown=HTTP_GRACE_SECONDS)
            self._server = uvicorn.Server(config)
            try:
                self._server.run(sockets=[sock])
            except (Exception, SystemExit) as error:  # uvicorn exits when its start fails
                log.error("HTTP server: %s: %s", type(error).__name__, error)
            if self._stop.is_set() or self.inherited:
                return
            self.restarts += 1
            log.warning("HTTP server on %s stopped by itself; starting it again in %.0f s",
                        self.url, backoff)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.max_backoff)

    def _rebind(self) -> socket.socket | None:
        try:
            return bind(self.host, self.port)
        except OSError as error:
            log.warning("HTTP server: cannot listen on %s again: %s", self.url, error)
            return None

    @property
    def serving(self) -> bool:
        """Whether uvicorn's thread runs (a server on an inherited socket does not come back)."""
        return self._thread is not None and self._thread.is_alive()

    def request_stop(self) -> None:
        """Stop accepting and finish what is under way (quick: safe in a signal handler)."""
        self._stop.set()
        if self._server is not None:
            self._server.should_exit = True

    def stop(self, timeout: float = HTTP_GRACE_SECONDS + 1.0) -> None:
        self.request_stop()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("HTTP server: requests still under way after %.1f s", timeout)
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def http_app(services: Services, host: str, port: int, mcp: bool = True) -> tuple[Any, bool]:
    """The application an HTTP server of ``services`` serves on ``host:port``, and whether MCP is
    in it (``mcp``, unless the MCP SDK cannot be imported here)."""
    from services.entrypoints.api import create_api

    mcp_app = None
    if mcp:
        try:
            from services.entrypoints.mcp import mcp_http_app
        except ImportError as error:
            log.warning("MCP is not available here (%s): REST only", error)
            mcp = False
        else:  # mounted at /mcp: its own route is the mount's root
            mcp_app = mcp_http_app(services, path="/", host=host, port=port)
    api = create_api(services, mcp_app=mcp_app)
    if mcp_app is not None:
        with_lifespan_of(api, mcp_app)
    return api, mcp


def with_lifespan_of(api: Any, mounted: Any) -> None:
    """Run ``mounted``'s lifespan (MCP's session manager) inside ``api``'s, unless ``api`` has a
    lifespan of its own (then it runs what it mounts itself)."""
    from starlette.routing import _DefaultLifespan

    if not isinstance(api.router.lifespan_context, _DefaultLifespan):
        return
    outer = api.router.lifespan_context

    @contextlib.asynccontextmanager
    async def both(app: Any) -> Any:
        async with mounted.router.lifespan_context(mounted), outer(app) as state:
            yield state

    api.router.lifespan_context = both
