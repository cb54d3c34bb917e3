"""``PALIMPSEST_LOG_LEVEL`` raises Palimpsest's own loggers only: another library's debug lines
quote what they carry (sse_starlette logs each streamed MCP answer whole at DEBUG), and a text in
a log is a text no erasure reaches."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import json, logging
from services.entrypoints.cli import configure_logging
configure_logging({level!r})
names = ["services.ingest.worker", "infra.relay", "projections.projector", "domain",
         "sse_starlette.sse", "mcp.server", "httpx", "faust", "uvicorn.error"]
print(json.dumps({{n: logging.getLogger(n).getEffectiveLevel() for n in names}}))
"""


def levels(level: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE.format(level=level)], check=True,
                         capture_output=True, text=True).stdout
    return dict(json.loads(out))


def test_debug_reaches_our_loggers_and_no_other_librarys() -> None:
    found = levels("DEBUG")
    assert all(found[n] == 10 for n in ("services.ingest.worker", "infra.relay",
                                        "projections.projector", "domain"))
    assert all(found[n] == 30 for n in ("sse_starlette.sse", "mcp.server", "httpx", "faust",
                                        "uvicorn.error")), found


def test_a_level_above_warning_quiets_every_library_too() -> None:
    found = levels("ERROR")
    assert set(found.values()) == {40}
