"""The REST edge of one ``Services`` under uvicorn, in a thread, on a free loopback port: what the
command line's tests talk to, as they would to ``palimpsest serve``."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from services.bootstrap import Services
from services.entrypoints.api import create_api


class ServedApi:
    """``with ServedApi(services) as served:`` — REST at ``served.url`` until the block ends."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))  # held by uvicorn from here on: no port race
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(create_api(services), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self._socket]},
                                       daemon=True)

    def __enter__(self) -> ServedApi:
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
