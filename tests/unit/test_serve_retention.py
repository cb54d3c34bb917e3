"""``serve``'s retention thread, wired without a database: started with the settings' interval and
batch on the server's own services (the application, the read models of its query side), its runs
go over every tenant with a policy, and it is stopped with the service well within the stop
deadline."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from infra.settings import Settings
from infra.supervision import Shutdown
from services.command.retention import Policy
from services.entrypoints.serve import STOP_DEADLINE, Service


class App:
    """What the worker asks of the application: the tenants with a policy, and each policy."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.ran = threading.Event()

    def clock(self) -> Any:
        from datetime import UTC, datetime

        return datetime.now(UTC)

    def retention_tenants(self) -> list[str]:
        self.ran.set()
        return ["kept"]

    def retention(self, tenant_id: str) -> Policy:
        self.asked.append(tenant_id)
        return Policy(None, False)  # every turn kept: nothing is read, nothing erased


def _service(interval: float) -> tuple[Service, App, Any]:
    settings = Settings(persistence="memory", retention_interval_seconds=interval,
                        retention_batch=7)
    service = Service(settings, Shutdown(), host="127.0.0.1", port=0, mcp=False, workers=0)
    app, read = App(), object()
    service.background = SimpleNamespace(app=app, read=read, keys=None, monitor=None)
    return service, app, read


def _start(service: Service) -> None:
    assert service.background is not None
    service._start_retention(service.background)


def _retention_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "retention" and t.is_alive()]


def test_serve_starts_the_retention_thread_and_stops_it_within_the_deadline() -> None:
    service, app, read = _service(interval=3_600)
    before = len(_retention_threads())
    _start(service)
    assert len(_retention_threads()) == before + 1
    assert not app.ran.is_set(), "the first run waits an interval"
    started = time.monotonic()
    service.close()
    assert time.monotonic() - started < STOP_DEADLINE / 2
    assert len(_retention_threads()) == before
    assert service.shutdown.stop.is_set()


def test_each_run_goes_over_the_tenants_with_a_policy() -> None:
    service, app, _ = _service(interval=0.01)
    _start(service)
    try:
        assert app.ran.wait(5), "no run"
        deadline = time.monotonic() + 5
        while not app.asked:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        service.close()
    assert set(app.asked) == {"kept"}


def test_the_worker_has_the_settings_and_the_servers_services(monkeypatch: Any) -> None:
    made: dict[str, Any] = {}

    class Worker:
        def __init__(self, app: Any, read_models: Any, interval: float, batch: int,
                     stop: threading.Event, lease: Any) -> None:
            made.update(app=app, read=read_models, interval=interval, batch=batch, stop=stop,
                        lease=lease)

        def start(self) -> None:
            made["started"] = True

        def stop(self, timeout: float) -> None:
            made["stopped"] = timeout

    monkeypatch.setattr("services.command.retention.RetentionWorker", Worker)
    service, app, read = _service(interval=42.0)
    _start(service)
    service.close()
    assert made == {"app": app, "read": read, "interval": 42.0, "batch": 7,
                    "stop": service.shutdown.stop, "lease": None, "started": True, "stopped": 1.0}
