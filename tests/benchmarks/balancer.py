"""A round-robin TCP balancer for benchmarks and tests: each connection it accepts goes to the next
backend in turn, bytes copied both ways until either side closes. A stand-in for the balancer a
deployment puts in front of several ``palimpsest serve`` processes (``docker-compose.yml`` runs
nginx). It runs on an event loop in a thread of the calling process, or as a process of its own
(so that it shares no GIL with the clients it serves), printing its port once it listens:

    with Balancer(["127.0.0.1:8001", "127.0.0.1:8002"]) as balancer:
        use(balancer.url)

    python -m tests.benchmarks.balancer 127.0.0.1:8001 127.0.0.1:8002
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Sequence
from types import TracebackType


class Balancer:
    def __init__(self, backends: Sequence[str], host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.accepted = 0
        self._backends = list(backends)
        self._turn = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="balancer", daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def backends(self) -> list[str]:
        return list(self._backends)

    @backends.setter
    def backends(self, backends: Sequence[str]) -> None:
        """Where the next connections go (those open keep their backend)."""
        self._backends = list(backends)

    def start(self) -> Balancer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the balancer did not start")
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, self.host, 0, backlog=1024))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        host, port = self._backends[next(self._turn) % len(self._backends)].rsplit(":", 1)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(_copy(reader, upstream_writer), _copy(upstream_reader, writer))

    def stop(self) -> None:
        """Close the listening socket and every connection it carries."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def __enter__(self) -> Balancer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65_536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def main() -> None:
    import signal
    import sys

    balancer = Balancer(sys.argv[1:]).start()
    print(balancer.port, flush=True)
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
    balancer.stop()


if __name__ == "__main__":
    main()
