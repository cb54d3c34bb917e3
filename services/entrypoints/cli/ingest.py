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

from services.entrypoints.cli import local
from services.entrypoints.cli.remote import AsJson, Key, Url, Wide, emit, fail, remote, table, when

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
        cards extracted in the background (a progress bar on stderr while it runs, then turns/s)."""
        if str(file) != "-" and not file.is_file():
            fail(as_json, "not_found", f"no file {file}")
        total = _count_lines(file)
        stream = sys.stdin if str(file) == "-" else file.open(encoding="utf-8")
        stored = replayed = 0
        note = None
        meter = Meter()
        with remote(url, key, as_json) as server, _progress(total, meter, as_json) as advance:
            for chunk in _batches(read_turns(stream, timezone), batch):
                answer = server.ingest([turn for _, turn in chunk])
                for result in answer["turns"]:
                    replayed += bool(result.get("replayed"))
                    stored += not result.get("replayed")
                note = answer["extraction"].get("note")
                advance(len(answer["turns"]))
        seconds = meter.stop()
        summary = {"stored": stored, "replayed": replayed, "seconds": seconds,
                   "turns_per_second": meter.rate(), "extraction": note or "on"}
        emit(summary, as_json, lambda s: typer.echo(
            f"{s['stored']} turn(s) stored, {s['replayed']} already stored, in {s['seconds']} s "
            f"({_rate(s['turns_per_second'])} turns/s); extraction: {s['extraction']}"))

    cli.add_typer(ingestions, name="ingestions")

    @cli.command(name="ingest-worker")
    def ingest_worker(data_dir: Path = local.DataDir) -> None:
        """Run the extraction worker: turns from the ingest topic to cards through the configured
        LLM (runs until stopped; `palimpsest serve` runs it itself when an LLM is configured).

        local: opens the database in --data-dir / PALIMPSEST_DATABASE_URL directly."""
        from services.entrypoints.ingest import run_ingest_worker

        raise SystemExit(run_ingest_worker(local.settings(data_dir)))


class Meter:
    """Turns handed over, from one clock: the rate the bar shows while the run goes and the one
    the summary says once it is done are the same sum over the same seconds."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.turns = 0
        self.seconds: float | None = None

    def add(self, turns: int) -> None:
        self.turns += turns

    def stop(self) -> float:
        """The run's seconds, as the summary shows them (to the hundredth): the rate is of those."""
        self.seconds = round(time.monotonic() - self.began, 2)
        return self.seconds

    def rate(self) -> float | None:
        """Turns a second, to one decimal (None before any time passed)."""
        seconds = self.seconds if self.seconds is not None else time.monotonic() - self.began
        return round(self.turns / seconds, 1) if seconds > 0 else None


def _rate(rate: float | None) -> str:
    return "—" if rate is None else f"{rate:,.1f}"


class _progress:
    """A Rich progress bar on stderr with the meter's turns/s and the time left, gone once the
    run is done (the summary says the rate then); nothing with ``--json``."""

    def __init__(self, total: int | None, meter: Meter, quiet: bool) -> None:
        self.total, self.meter, self.quiet = total, meter, quiet
        self._bar: Any = None

    def __enter__(self) -> Any:
        if self.quiet:
            return self.meter.add
        from rich.console import Console
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
                             TimeRemainingColumn(), console=Console(stderr=True), transient=True)
        self._bar.start()
        task = self._bar.add_task("turns", total=self.total, rate="—")

        def advance(count: int) -> None:
            self.meter.add(count)
            self._bar.update(task, advance=count, rate=_rate(self.meter.rate()))

        return advance

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


@ingestions.callback(invoke_without_command=True)
def listing(ctx: typer.Context,
            status: str = typer.Option(None, help="received, extracted, applied, dead_letter or erased."),
            limit: int = typer.Option(50, min=1, max=1_000),
            wide: bool = Wide, url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """The tenant's ingested turns, newest first, with counts per status; a dead letter's id, printed
    whole, is what `palimpsest ingestions rerun ID` takes."""
    if ctx.invoked_subcommand is not None:
        return
    with remote(url, key, as_json) as server:
        answer = server.ingestions(status=status, limit=limit)
    emit(answer, as_json, lambda found: _print_ingestions(found, wide))


def _print_ingestions(found: dict[str, Any], wide: bool) -> None:
    counts = ", ".join(f"{n} {s}" for s, n in found["counts"].items())
    typer.echo(f"turns: {counts}; extraction: {found['extraction'].get('note') or 'on'}")
    table(("id", "status", "session/turn", "said", "attempts", "cards", "error"),
          [(i["ingestion_id"], i["status"], f"{i['session_id']}/{i['turn_id']}",
            when(i["said_at"]), i["attempts"], len(i["card_ids"] or ()), i["error"])
           for i in found["ingestions"]],
          wrap=("error",), optional=("cards", "attempts", "said", "session/turn"), wide=wide)
    if any(i["status"] == "dead_letter" for i in found["ingestions"]):
        typer.echo("re-run a dead letter: palimpsest ingestions rerun ID")


@ingestions.command()
def rerun(ingestion_id: str = typer.Argument(..., metavar="ID", help="A dead letter's id."),
          url: str = Url, key: str = Key, as_json: bool = AsJson) -> None:
    """Re-run a dead-lettered turn's extraction (it goes back on the ingest topic)."""
    with remote(url, key, as_json) as server:
        answer = server.rerun_ingestion(ingestion_id)
    emit(answer, as_json, lambda a: typer.echo(f"{a['outcome']}: turn {ingestion_id} handed to "
                                               f"extraction again; position {a.get('position')}"))
