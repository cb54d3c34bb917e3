"""The demo's scripted history, written as ``palimpsest demo`` writes it: through the REST client,
to the REST edge of an in-process ``Services`` on the demo's simulated clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from palimpsest_client import Client

from infra.settings import Settings
from services.bootstrap import Services, build_services
from services.entrypoints.demo import Script, SimulatedClock, run_demo
from services.keys import SCOPES
from tests.integration.rest_server import ServedApi
from tests.support import new_tenant


@contextmanager
def demo_history(settings: Settings) -> Iterator[tuple[Script, Services, SimulatedClock]]:
    """The history written for a fresh tenant; the services (their ``app``: the command side)
    and the clock it was written on, until the block ends."""
    clock = SimulatedClock()
    services = build_services(settings, clock=clock)
    try:
        tenant = new_tenant()
        _, key = services.keys.create(tenant, SCOPES, "demo")
        with ServedApi(services) as served, Client(served.url, key) as client:
            yield run_demo(client, clock, lambda line: None, tenant, services.app), services, clock
    finally:
        services.close()
