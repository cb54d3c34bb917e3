"""``palimpsest serve``: the whole service in one process tree, supervised (DESIGN §5).

On the embedded default one command starts, in this order:

* the HTTP socket — bound first, so a port in use fails before anything else starts;
* PostgreSQL — the data folder's embedded server (unless ``PALIMPSEST_DATABASE_URL`` is set),
  the event store bootstrapped;
* the command and query sides and the key store (:func:`services.bootstrap.build_services`);
* the pipeline of ``palimpsest pipeline`` (:class:`services.entrypoints.pipeline.Pipeline`): the broker
  (the data folder's tansu, kept up on its one port, unless ``PALIMPSEST_KAFKA_BOOTSTRAP`` is
  set), the relay and ingest relay threads, the Faust projector as a child process with its
  embedding thread, and — when an LLM is configured — the extraction worker as a child process;
* the consolidation scans, a thread (advisory: they only record proposals);
* the retention runs, a thread: each ``retention_interval_seconds`` every tenant's retention
  policy erases the raw conversation turns older than it keeps (a tenant without one keeps every
  turn);
* the HTTP server: uvicorn in a thread of this process, REST under ``/v1`` and MCP over
  streamable HTTP at ``/mcp``.

A part that dies is started again: the broker by its keeper, the projector and the extraction
worker by the pipeline, the
HTTP server here (a fresh app on the same port, with backoff). SIGINT or SIGTERM stops them all
within :data:`services.entrypoints.pipeline.STOP_SECONDS`: the HTTP server first (requests under way
finish: a write is committed to the event store before it is answered, so no accepted write is
lost; the relay and projector catch up at the next start), then the pipeline, then PostgreSQL
(left at exit, stopped by the last process in it) — a stop that hangs is forced by
:class:`infra.supervision.Shutdown`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from infra.embedded_pg import release_embedded
from infra.processes import process_shutdown
from infra.settings import Settings
from infra.supervision import Shutdown
from services.entrypoints.pipeline import Pipeline, leave, prepare

log = logging.getLogger(__name__)

#: The tenant of the key ``serve`` makes on the embedded default's first start.
DEFAULT_TENANT = "local"
#: That key's name in ``palimpsest keys list``.
DEFAULT_KEY_NAME = "made by palimpsest serve"
#: Seconds uvicorn gives requests under way once a stop is asked.
HTTP_GRACE_SECONDS = 1
#: A stop not done by then is forced (:class:`Shutdown`): the projector, told at once, has
#: ``STOP_SECONDS / 2`` of it; the HTTP server, the relay and PostgreSQL share the rest.
STOP_DEADLINE = 5.0


@dataclass(frozen=True)
class Endpoints:
    """Where the running service answers, and the local key (its secret only when just made)."""

    url: str
    mcp: str | None
    tenant_id: str | None = None
    key_id: str | None = None
    key: str | None = None

    def banner(self, settings: Settings) -> list[str]:
        where = "PostgreSQL at PALIMPSEST_DATABASE_URL" if settings.database_url else (
            f"the embedded PostgreSQL in {settings.data_dir}/")
        broker = settings.kafka_bootstrap or "the embedded broker"
        lines = [f"Palimpsest is serving ({where}, Kafka: {broker})",
                 f"  REST  {self.url}/v1   (OpenAPI: {self.url}/docs)",
                 f"  MCP   {self.mcp}" if self.mcp else "  MCP   off"]
        if self.key:
            lines += [f"  key   {self.key}",
                      f"        tenant {self.tenant_id!r}, key id {self.key_id}; shown once, stored "
                      "hashed: keep it (export PALIMPSEST_KEY=…)"]
        elif self.key_id:
            lines.append(f"  key   tenant {self.tenant_id!r} has a key ({self.key_id}); another: "
                         f"palimpsest keys create --tenant {self.tenant_id}")
        else:
            lines.append("  key   none made here; make one: palimpsest keys create --tenant TENANT")
        lines.append("Ctrl-C stops it.")
        return lines

    def to_dict(self, settings: Settings) -> dict[str, Any]:
        """The banner as one JSON object (``serve --json``): the secret only when just made."""
        return {"rest": f"{self.url}/v1", "docs": f"{self.url}/docs", "mcp": self.mcp,
                "tenant_id": self.tenant_id, "key_id": self.key_id, "key": self.key,
                "database": "external" if settings.database_url else str(settings.data_dir),
                "broker": settings.kafka_bootstrap or "embedded"}


def default_key(keys: Any, tenant_id: str = DEFAULT_TENANT) -> tuple[str, str | None]:
    """The default tenant's key: ``(key id, secret)`` when made now, ``(key id, None)`` when one
    exists (a secret is never shown twice)."""
    for info in keys.list(tenant_id):
        if info.revoked_at is None:
            return info.key_id, None
    info, secret = keys.create(tenant_id, ("memory:read", "memory:write", "memory:admin"),
                               DEFAULT_KEY_NAME)
    return info.key_id, secret


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
                 max_backoff: float = 10.0) -> None:
        self.make_app = make_app
        self.host = host
        self.sock: socket.socket | None = bind(host, port)
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
            if self._stop.is_set():
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


class Service:
    """Everything ``serve`` runs, started by :meth:`start` and stopped by :meth:`close` (the
    demo runs one in its own process). ``clock`` is the command and query sides' clock."""

    def __init__(self, settings: Settings, shutdown: Shutdown, *, host: str | None = None,
                 port: int | None = None, mcp: bool = True, clock: Callable[..., Any] | None = None,
                 local_key: bool | None = None) -> None:
        self.settings = settings
        self.shutdown = shutdown
        self.mcp = mcp
        self.clock = clock
        self.make_key = (not settings.database_url) if local_key is None else local_key
        self.http = HttpServer(self._make_app, host or settings.api_host,
                               settings.api_port if port is None else port)
        self.services: Any = None
        self.pipeline: Pipeline | None = None
        self.endpoints: Endpoints | None = None
        self._started: list[Callable[[], None]] = []

    def start(self) -> Endpoints:
        from services.bootstrap import build_services

        try:
            self.settings = prepare(self.settings)  # starts the embedded PostgreSQL
            self._started.append(self._leave)
            extra = {"clock": self.clock} if self.clock is not None else {}
            self.services = build_services(self.settings, **extra)
            self._started.append(self.services.close)
            self.pipeline = Pipeline(self.settings, self.shutdown, self.services.app.recorder)
            self._started.append(self.pipeline.close)
            self._start_consolidation()
            self._start_retention()
            key_id, secret = default_key(self.services.keys) if self.make_key else (None, None)
            self.shutdown.on_stop(self.http.request_stop)
            self.http.start()
        except BaseException:
            self.close()
            raise
        self.endpoints = Endpoints(self.http.url, f"{self.http.url}/mcp/" if self.mcp else None,
                                   DEFAULT_TENANT if key_id else None, key_id, secret)
        return self.endpoints

    def _start_consolidation(self) -> None:
        """The advisory consolidation scans (``consolidation_enabled``), a thread of this
        process: they only record proposals."""
        if not self.settings.consolidation_enabled or self.services.monitor is None:
            return
        from services.command.consolidation import consolidation_worker

        worker = consolidation_worker(self.services.app, self.services.queries.read,
                                      self.services.monitor, self.settings, self.shutdown.stop)
        worker.start()
        # a scan under way is left (the thread is a daemon): it only records proposals, each once
        self._started.append(lambda: worker.stop(timeout=1.0))

    def _start_retention(self) -> None:
        """The tenants' retention policies (``services.command.retention``), applied by a thread of this
        process, reading the read models as the runtime role; always started."""
        from services.command.retention import RetentionWorker

        worker = RetentionWorker(self.services.app, self.services.queries.read,
                                 self.settings.retention_interval_seconds,
                                 self.settings.retention_batch, stop=self.shutdown.stop)
        worker.start()
        # a run under way stops before its next turn; one cut off is idempotent (a request id
        # per turn): the next start's run erases what it left
        self._started.append(lambda: worker.stop(timeout=1.0))

    def _leave(self) -> None:
        """Leave the embedded PostgreSQL now (it stops when no other live process is in it)
        instead of at the interpreter's exit, which comes later."""
        leave(self.settings)
        if not self.settings.database_url:
            release_embedded(self.settings.data_dir)

    def _make_app(self) -> Any:
        from services.entrypoints.api import create_api

        mcp_app = None
        if self.mcp:
            try:
                from services.entrypoints.mcp import mcp_http_app
            except ImportError as error:
                log.warning("MCP is not available here (%s): REST only", error)
                self.mcp = False
            else:  # mounted at /mcp: its own route is the mount's root
                mcp_app = mcp_http_app(self.services, path="/", host=self.http.host,
                                       port=self.http.port)
        api = create_api(self.services, mcp_app=mcp_app)
        if mcp_app is not None:
            with_lifespan_of(api, mcp_app)
        return api

    def supervise(self) -> int:
        """Until a stop: 0, or the projector's ``FAILED_EXIT`` (it cannot go on)."""
        assert self.pipeline is not None
        return self.pipeline.supervise(self.shutdown.stop)

    def close(self) -> None:
        """Stop what was started, the last first, the HTTP server before what it calls."""
        self.shutdown.stop.set()
        self.http.stop()
        while self._started:
            stop = self._started.pop()
            try:
                stop()
            except Exception:
                log.exception("serve: stopping a part failed")


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


@contextlib.contextmanager
def serving(settings: Settings, shutdown: Shutdown, **options: Any) -> Iterator[Service]:
    """A started :class:`Service`, closed on the way out."""
    service = Service(settings, shutdown, **options)
    service.start()
    try:
        yield service
    finally:
        service.close()


def run_serve(settings: Settings, *, host: str | None = None, port: int | None = None,
              mcp: bool = True, local_key: bool | None = None,
              say: Callable[[str], None] = print, as_json: bool = False) -> int:
    """``palimpsest serve``: run until SIGINT/SIGTERM; 0, or the projector's ``FAILED_EXIT``.
    Once it answers, ``say`` is told where: the banner's lines, or one JSON object."""
    shutdown = process_shutdown("serve", settings, deadline=STOP_DEADLINE)
    try:
        with serving(settings, shutdown, host=host, port=port, mcp=mcp,
                     local_key=local_key) as service:
            assert service.endpoints is not None
            if as_json:
                say(json.dumps(service.endpoints.to_dict(service.settings)))
            for line in () if as_json else service.endpoints.banner(service.settings):
                say(line)
            return service.supervise()
    finally:
        shutdown.done()
