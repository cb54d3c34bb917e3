"""Ingest over a running server, and the extraction worker's process.

    palimpsest ingest FILE.jsonl [--batch 100] [--timezone ZONE]   hand over conversation turns
    palimpsest ingestions [--status dead_letter] [--limit N]        where each turn stands
    palimpsest ingestions rerun ID                                  re-run a dead letter
    palimpsest ingest-worker                                        the extraction worker (local)

``FILE.jsonl`` holds one turn per line: ``{"session_id", "turn_id", "role", "text", "said_at",
"timezone", "agent_id"}`` (``timezone`` may come from ``--timezone``; ``-`` reads stdin). Lines are
sent in batches; a line that is not a turn stops the run before that batch, naming its line.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import typer

from services.entrypoints.cli.remote import AsJson, Key, Url, emit, fail, remote, table, when

ingestions = typer.Typer(help="Ingested turns: where each stands; re-run a dead letter.")
TurnsFile = typer.Argument(..., help="A JSON-lines file of turns ('-': stdin).", allow_dash=True)


def read_turns(stream: IO[str], timezone: str | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, turn) for each non-blank line; a line that is no JSON object is a usage
    error naming it."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            turn = json.loads(line)
        except json.JSONDecodeError as error:
            raise typer.BadParameter(f"line {number} is not JSON: {error}") from None
        if not isinstance(turn, dict):
            raise typer.BadParameter(f"line {number} is not a JSON object")
        if timezone and "timezone" not in turn:
            turn["timezone"] = timezone
        yield number, turn


def _batches(turns: Iterator[tuple[int, dict[str, Any]]], size: int
             ) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    batch: list[tuple[int, dict[str, Any]]] = []
    for item in turns:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _count_lines(path: Path) -> int | None:
    if str(path) == "-":
        return None
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


def register(cli: typer.Typer) -> None:
    """Add ``ingest``, ``ingestions`` and ``ingest-worker`` to the command line."""

    @cli.command()
    def ingest(
        file: Path = TurnsFile,
        batch: int = typer.Option(100, min=1, max=500, help="Turns per request."),
        timezone: str = typer.Option(None, help="The zone of turns that name none (IANA)."),
        url: str = Url, key: str = Key, as_json: bool = AsJson,
    ) -> None:
        """Hand over conversation turns; each is stored at once as an episodic event card, its
        cards extracted in the background (progress: turns/s and ETA)."""
        if str(file) != "-" and not file.is_file():
            fail(as_json, "not_found", f"no file {file}")
        total = _count_lines(file)
        stream = sys.stdin if str(file) == "-" else file.open(encoding="utf-8")
        stored = replayed = 0
        note = None
        began = time.monotonic()
        with remote(url, key, as_json) as server, _progress(total, as_json) as advance:
            for chunk in _batches(read_turns(stream, timezone), batch):
                answer = server.ingest([turn for _, turn in chunk])
                for result in answer["turns"]:
                    replayed += bool(result.get("replayed"))
                    stored += not result.get("replayed")
                note = answer["extraction"].get("note")
                advance(len(chunk))
        elapsed = time.monotonic() - began
        summary = {"stored": stored, "replayed": replayed, "seconds": round(elapsed, 2),
                   "turns_per_second": round((stored + replayed) / elapsed, 1) if elapsed else None,
                   "extraction": note or "on"}
        emit(summary, as_json, lambda s: typer.echo(
            f"{s['stored']} turn(s) stored, {s['replayed']} already stored, in {s['seconds']} s "
            f"({s['turns_per_second']} turns/s); extraction: {s['extraction']}"))

    cli.add_typer(ingestions, name="ingestions")

    @cli.command(name="ingest-worker")
    def ingest_worker() -> None:
        """Run the extraction worker: turns from the ingest topic to cards through the configured
        LLM (runs until stopped; `palimpsest serve` runs it itself when an LLM is configured)."""
        from infra.settings import Settings
        from services.entrypoints.ingest import run_ingest_worker

        raise SystemExit(run_ingest_worker(Settings()))


class _progress:
    """A Rich progress bar with turns/s and the time left; nothing with ``--json``."""

    def __init__(self, total: int | None, quiet: bool) -> None:
        self.total, self.quiet = total, quiet
        self._bar: Any = None

    def __enter__(self) -> Any:
        if self.quiet:
            return lambda n: None
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(TextColumn("ingest"), BarColumn(), MofNCompleteColumn(),
                             TaskProgressColumn(), TextColumn("{task.fields[rate]} turns/s"),
                             TimeRemainingColumn(), transient=False)
        self._bar.start()
        task = self._bar.add_task("turns", total=self.total, rate="—")
        began, done = time.monotonic(), [0]

        def advance(count: int) -> None:
            done[0] += count
            rate = done[0] / max(time.monotonic() - began, 1e-6)
            self._bar.update(task, advance=count, rate=f"{rate:,.0f}")

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


@ingestions.callback(invoke_without_command=True)
def listing(ctx: typer.Context,
            status: str = typer.Option(None, help="received, extracted, applied or dead_letter."),
            limit: int = typer.Option(50, min=1, max=1_000),
            url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """The tenant's ingested turns, newest first, with counts per status."""
    if ctx.invoked_subcommand is not None:
        return
    with remote(url, key, as_json) as server:
        answer = server.ingestions(status=status, limit=limit)

    def human(found: dict[str, Any]) -> None:
        counts = ", ".join(f"{n} {s}" for s, n in found["counts"].items())
        typer.echo(f"turns: {counts}; extraction: {found['extraction'].get('note') or 'on'}")
        table(("id", "status", "session/turn", "said", "attempts", "cards", "error"),
              [(i["ingestion_id"], i["status"], f"{i['session_id']}/{i['turn_id']}",
                when(i["said_at"]), i["attempts"], len(i["card_ids"] or ()), i["error"])
               for i in found["ingestions"]])

    emit(answer, as_json, human)


@ingestions.command()
def rerun(ingestion_id: str = typer.Argument(..., metavar="ID", help="A dead letter's id."),
          url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """Re-run a dead-lettered turn's extraction (it goes back on the ingest topic)."""
    with remote(url, key, as_json) as server:
        answer = server.rerun_ingestion(ingestion_id)
    emit(answer, as_json, lambda a: typer.echo(f"{a['outcome']}: turn {ingestion_id} handed to "
                                               f"extraction again; position {a.get('position')}"))
