"""The code examples of the README and the documentation, run as a reader runs them.

Every fenced ``python`` and ``bash`` block of a Markdown page is an example, unless the line just
before its fence is ``<!-- no-run -->`` (starting a server, installing, a real model). Each runs
as a process of its own — ``python -c`` or ``bash -euo pipefail -c`` — in a fresh folder, against
a running ``palimpsest serve``: ``PALIMPSEST_URL`` and ``PALIMPSEST_KEY`` (a key of the tenant
``local`` with every scope) are set, ``palimpsest`` is on the PATH. A page's examples run in order,
then all of them once more: an example must hold on a second run against the same server (no
example may depend on a store only it has written to). A Python line ``print(…)  # shown`` says
what it prints: the lines printed must include each such comment, in order.

``python -m tests.docs_examples README.md docs/api.md …`` starts a server of its own (a temporary
folder), runs the pages' examples twice, prints each failing block with what it printed, and
exits 1 if any failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_RUN = "<!-- no-run -->"
LANGUAGES = ("python", "bash")
#: Each example, at most (a search waits for the read models within this).
EXAMPLE_SECONDS = 120
FULL_SCOPES = ("memory:read", "memory:write", "memory:admin", "memory:erase")

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+)(?P<info>[^`\n]*)$")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"


def blocks(page: Path) -> Iterator[tuple[int, str, str, bool]]:
    """Every fenced block of ``page``: (line of its fence, language, code, marked no-run)."""
    return fenced(page.read_text(encoding="utf-8"))


def fenced(text: str) -> Iterator[tuple[int, str, str, bool]]:
    """Every fenced block of Markdown ``text``: (line of its fence, language, code, marked no-run)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = _FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        fence, language = opened["fence"], opened["info"].strip().split(" ")[0]
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][len(opened["indent"]):])
            j += 1
        yield i + 1, language, "\n".join(body) + "\n", before == NO_RUN
        i = j + 1


def examples(page: Path) -> list[Example]:
    return [Example(page, line, language, code) for line, language, code, skipped in blocks(page)
            if language in LANGUAGES and not skipped]


def skipped(page: Path) -> list[tuple[int, str]]:
    """The blocks of a runnable language marked not to run: (line, language)."""
    return [(line, language) for line, language, _, marked in blocks(page)
            if language in LANGUAGES and marked]


@dataclass(frozen=True)
class Outcome:
    example: Example
    run: int
    code: int
    output: str

    @property
    def ok(self) -> bool:
        return self.code == 0 and not self.unprinted

    @property
    def unprinted(self) -> list[str]:
        """What the example's comments say it prints that it did not, in order."""
        printed = iter(line.strip() for line in self.output.splitlines())
        return [shown for shown in promised(self.example) if shown not in printed]

    def report(self) -> str:
        missing = f"; it did not print {self.unprinted}" if self.unprinted else ""
        return (f"{self.example.where()} ({self.example.language}, run {self.run}) exited "
                f"{self.code}{missing}:\n{self.example.code}\n--- output ---\n{self.output[-3000:]}")


def promised(example: Example) -> list[str]:
    """What the ``print(…)  # …`` lines of a Python example say they print, in order."""
    if example.language != "python":
        return []
    return [line.rsplit("  # ", 1)[1].strip() for line in example.code.splitlines()
            if line.strip().startswith("print(") and "  # " in line]


def run(example: Example, env: dict[str, str], run_number: int = 1) -> Outcome:
    command = ([sys.executable, "-c", example.code] if example.language == "python"
               else ["bash", "-euo", "pipefail", "-c", example.code])
    with tempfile.TemporaryDirectory(prefix="example-") as folder:
        try:
            done = subprocess.run(command, env=env, cwd=folder, capture_output=True, text=True,
                                  timeout=EXAMPLE_SECONDS)
        except subprocess.TimeoutExpired as expired:
            out = (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) else str(
                expired.stdout or "")
            return Outcome(example, run_number, -1, out + f"\n(timed out after {EXAMPLE_SECONDS} s)")
    return Outcome(example, run_number, done.returncode, done.stdout + "\n" + done.stderr)


def run_twice(pages: list[Path], env: dict[str, str]) -> list[Outcome]:
    """Each page's examples in order, then again; every outcome."""
    outcomes = []
    for page in pages:
        found = examples(page)
        for number in (1, 2):
            outcomes += [run(example, env, number) for example in found]
    return outcomes


def example_env(url: str, key: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
    path = os.pathsep.join([str(Path(sys.executable).parent), kept.get("PATH", "")])
    return {**kept, "PATH": path, "PALIMPSEST_URL": url, "PALIMPSEST_KEY": key,
            "MEM0_TELEMETRY": "false", "PYTHONUNBUFFERED": "1"}


def full_key(data: Path) -> str:
    """A new key of the tenant ``local`` with every scope, made in ``data`` as an operator does."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PALIMPSEST_")}
    env["PALIMPSEST_DATA_DIR"] = str(data)
    scopes = [arg for scope in FULL_SCOPES for arg in ("--scope", scope)]
    done = subprocess.run([sys.executable, "-m", "services.entrypoints.cli", "keys", "create",
                           "--tenant", "local", *scopes, "--name", "examples", "--json"],
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    return str(json.loads(done.stdout)["secret"])


@contextmanager
def serving(root: Path) -> Iterator[dict[str, str]]:
    """``palimpsest serve`` in ``root``; the environment an example runs with."""
    from tests.integration.test_serve import Served

    served = Served(root)
    served.extra = {"PALIMPSEST_PROJECTOR_EMBEDDINGS": "true"}  # as a user's serve runs
    try:
        started = served.start()
        yield example_env(started["url"], full_key(served.data))
    finally:
        served.close()


def main(argv: list[str]) -> int:
    pages = [Path(p).resolve() for p in argv] or [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    count = sum(len(examples(p)) for p in pages)
    print(f"{count} examples in {len(pages)} pages, each run twice", flush=True)
    root = Path(tempfile.mkdtemp(prefix="docs-examples-"))
    try:
        with serving(root) as env:
            outcomes = run_twice(pages, env)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    failed = [o for o in outcomes if not o.ok]
    for outcome in failed:
        print("\n" + outcome.report())
    print(f"\n{len(outcomes) - len(failed)} of {len(outcomes)} runs passed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
