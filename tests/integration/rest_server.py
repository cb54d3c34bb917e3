"""The REST edge of one ``Services`` under uvicorn, in a thread, on a free loopback port: what the
command line's tests talk to, as they would to ``palimpsest serve``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Self

import uvicorn

from services.bootstrap import Services
from services.entrypoints.api import create_api


class ServedApp:
    """``with ServedApp(app_for) as served:`` — the ASGI app ``app_for(port)`` under uvicorn at
    ``served.url`` until the block ends; ``lifespan`` as uvicorn takes it."""

    def __init__(self, app_for: Callable[[int], Any], *, lifespan: str = "off") -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))  # held by uvicorn from here on: no port race
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app_for(self.port), log_level="warning", lifespan=lifespan)  # type: ignore[arg-type]
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._socket]},
                                       daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self._socket.close()


class ServedApi(ServedApp):
    """``with ServedApi(services) as served:`` — REST at ``served.url`` until the block ends."""

    def __init__(self, services: Services) -> None:
        self.services = services
        super().__init__(lambda _port: create_api(services))
