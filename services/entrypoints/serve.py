"""``palimpsest serve``: the whole service in one process tree, supervised (DESIGN §5, §9).

On the embedded default one command starts, in this order:

* the HTTP socket — bound first, so a port in use fails before anything else starts;
* PostgreSQL — the data folder's embedded server (unless ``PALIMPSEST_DATABASE_URL`` is set),
  the event store bootstrapped;
* the command side and the key store, and the query side when this process answers requests
  (:mod:`services.bootstrap`);
* unless ``serve_pipeline`` is off (the relay, projectors and extraction workers run as services
  of their own), the pipeline of ``palimpsest pipeline``
  (:class:`services.entrypoints.pipeline.Pipeline`): the broker (the data folder's tansu, kept up
  on its one port, unless ``PALIMPSEST_KAFKA_BOOTSTRAP`` is set), the relay and ingest relay
  threads, the Faust projector as a child process with its embedding thread, and — when an LLM
  is configured — the extraction worker as a child process;
* the consolidation scans and the retention runs, a thread each (each ``retention_interval_
  seconds`` every tenant's retention policy erases the raw conversation turns older than it
  keeps), run by one ``serve`` process at a time among those on one database (a lease);
* the HTTP server, REST under ``/v1``, MCP over streamable HTTP at ``/mcp`` and the console:
  ``api_workers`` worker processes sharing the socket (:mod:`services.entrypoints.api_workers`),
  none of them sharing a GIL with the relays and the background jobs of this process (the demo,
  on a simulated clock, answers in a thread of this process instead).

A part that dies is started again: the broker by its keeper, the projector and the extraction
worker by the pipeline, an HTTP worker process by its supervisor (the demo's HTTP server here: a
fresh app on the same port), each with backoff. SIGINT or SIGTERM stops them all within
:data:`STOP_DEADLINE`: the HTTP server first (requests under way finish: a write is committed to
the event store before it is answered, so no accepted write is lost; the relay and projector catch
up at the next start), then the pipeline, then PostgreSQL (left at exit, stopped by the last
process in it) — a stop that hangs is forced by :class:`infra.supervision.Shutdown`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from infra.embedded_pg import release_embedded
from infra.postgres import Database, Lease
from infra.processes import process_shutdown
from infra.settings import Settings
from infra.supervision import Shutdown
from services.entrypoints.api_workers import ApiWorkers
from services.entrypoints.http import CannotListenError, HttpServer, http_app
from services.entrypoints.pipeline import Pipeline, leave, prepare

if TYPE_CHECKING:
    from services.bootstrap import Background, Services

log = logging.getLogger(__name__)

#: The tenant of the key ``serve`` makes on the embedded default's first start.
DEFAULT_TENANT = "local"
#: The scopes of the key ``serve`` makes for the ``local`` tenant: all of them (the tour erases).
NEWCOMER_SCOPES = ("memory:read", "memory:write", "memory:admin", "memory:erase")
#: That key's name in ``palimpsest keys list``.
DEFAULT_KEY_NAME = "made by palimpsest serve"
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
    exists (a secret is never shown twice). It is the newcomer's own, on their own tenant: every
    scope, ``memory:erase`` included, so the tour's erasures run with it; an agent is given a key
    made without ``memory:erase`` (``palimpsest keys create``)."""
    for info in keys.list(tenant_id):
        if info.revoked_at is None:
            return info.key_id, None
    info, secret = keys.create(tenant_id, NEWCOMER_SCOPES, DEFAULT_KEY_NAME)
    return info.key_id, secret


class Service:
    """Everything ``serve`` runs, started by :meth:`start` and stopped by :meth:`close` (the
    demo runs one in its own process). ``clock`` is the command and query sides' clock."""

    def __init__(self, settings: Settings, shutdown: Shutdown, *, host: str | None = None,
                 port: int | None = None, mcp: bool = True, clock: Callable[..., Any] | None = None,
                 local_key: bool | None = None, workers: int | None = None) -> None:
        self.settings = settings
        self.shutdown = shutdown
        self.mcp = mcp
        self.clock = clock
        self.make_key = (not settings.database_url) if local_key is None else local_key
        host, port = host or settings.api_host, settings.api_port if port is None else port
        #: HTTP worker processes (``workers``, else the setting); 0 when a clock is given: this
        #: process answers (a clock cannot cross into another process).
        self.workers = 0 if clock is not None else (workers if workers is not None
                                                   else settings.api_workers)
        self.http: HttpServer | ApiWorkers
        if self.workers:
            settings = self.settings = with_console_key(settings)
            self.http = ApiWorkers(settings, host, port, self.workers, mcp)
        else:
            self.http = HttpServer(self._make_app, host, port)
        #: The query side too when this process answers requests (no worker processes).
        self.services: Services | None = None
        self.background: Background | None = None
        self.pipeline: Pipeline | None = None
        self.endpoints: Endpoints | None = None
        self._started: list[Callable[[], None]] = []

    def start(self) -> Endpoints:
        from services.bootstrap import build_background, build_services

        extra = {"clock": self.clock} if self.clock is not None else {}
        try:
            self.settings = prepare(self.settings)  # starts the embedded PostgreSQL
            self._started.append(self._leave)
            self.background = build_background(self.settings, **extra)
            self._started.append(self.background.close)
            if not isinstance(self.http, ApiWorkers):  # this process answers: as the HTTP role
                self.services = build_services(self.settings, http=True, **extra)
                self._started.append(self.services.close)
            if self.settings.serve_pipeline:
                self.pipeline = Pipeline(self.settings, self.shutdown, self.background.app.recorder)
                self._started.append(self.pipeline.close)
            self._start_consolidation(self.background)
            self._start_retention(self.background)
            if self.background.monitor is not None:  # the HTTP processes' parked-event requests
                from projections.worker import start_requests

                start_requests(self.settings, self.background.app, self.background.monitor,
                               self.shutdown.stop)
            key_id, secret = default_key(self.background.keys) if self.make_key else (None, None)
            self.shutdown.on_stop(self.http.request_stop)
            self.http.start()
        except BaseException:
            self.close()
            raise
        self.endpoints = Endpoints(self.http.url, f"{self.http.url}/mcp/" if self.mcp else None,
                                   DEFAULT_TENANT if key_id else None, key_id, secret)
        return self.endpoints

    def _start_consolidation(self, background: Background) -> None:
        """The advisory consolidation scans (``consolidation_enabled``), a thread of this
        process: they only record proposals. Several ``serve`` processes on one database take
        turns by a lease: one scans at a time."""
        if not self.settings.consolidation_enabled or background.monitor is None:
            return
        from services.command.consolidation import consolidation_worker

        worker = consolidation_worker(
            background.app, background.read, background.monitor, self.settings,
            self.shutdown.stop, jobs_lease(self.settings, background.monitor, "consolidation"))
        worker.start()
        # a scan under way is left (the thread is a daemon): it only records proposals, each once
        self._started.append(lambda: worker.stop(timeout=1.0))

    def _start_retention(self, background: Background) -> None:
        """The tenants' retention policies (``services.command.retention``), applied by a thread of
        this process, reading the read models as the runtime role; always started, and run by one
        ``serve`` process at a time (a lease)."""
        from services.command.retention import RetentionWorker

        worker = RetentionWorker(background.app, background.read,
                                 self.settings.retention_interval_seconds,
                                 self.settings.retention_batch, stop=self.shutdown.stop,
                                 lease=jobs_lease(self.settings, background.monitor, "retention"))
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
        assert self.services is not None
        app, self.mcp = http_app(self.services, self.http.host, self.http.port, self.mcp)
        return app

    def supervise(self) -> int:
        """Until a stop: 0, or the projector's ``FAILED_EXIT`` (it cannot go on)."""
        if self.pipeline is None:
            self.shutdown.stop.wait()
            return 0
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


def with_console_key(settings: Settings) -> Settings:
    """``settings`` with a console session key: its own, or one made now, which this start's
    HTTP workers share (a cookie sealed by one opens in every other)."""
    if settings.console_session_key is not None:
        return settings
    from cryptography.fernet import Fernet
    from pydantic import SecretStr

    return settings.model_copy(update={"console_session_key": SecretStr(Fernet.generate_key().decode())})


def jobs_lease(settings: Settings, monitor: Database | None, job: str) -> Lease | None:
    """The lease of a periodic job over the read models in ``settings.read_schema``: one
    ``serve`` process at a time runs it."""
    if monitor is None:
        return None
    return Lease(monitor.connect, f"palimpsest {job} {settings.read_schema}")


__all__ = ["CannotListenError", "Endpoints", "Service", "jobs_lease", "run_serve", "serving"]


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
