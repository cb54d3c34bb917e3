"""The command line: the dataset, ``palimpsest serve``, the turns, the questions, the baselines,
the report."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
import uuid
from contextlib import redirect_stdout
from pathlib import Path

from infra.embedded_pg import stop_embedded
from tests.benchmarks.bench_api import start_server, stop_server
from tests.benchmarks.conversations import baselines, dataset, drive
from tests.benchmarks.conversations.dataset import Conversation
from tests.benchmarks.conversations.drive import progress
from tests.benchmarks.conversations.metrics import Answer
from tests.benchmarks.conversations.report import Report, table, to_json
from tests.benchmarks.folders import bench_folder

#: No extraction model: the turns stay raw event cards.
NO_EXTRACTION = {"PALIMPSEST_LLM_BASE_URL": ""}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="palimpsest bench conversations",
        description="Conversation recall on LoCoMo's format: raw turns through POST /v1/ingest "
                    "(extraction off), each question through POST /v1/search (top_n 10), beside "
                    "BM25 and the encoder alone over the same turns.")
    parser.add_argument("--dataset", type=Path, required=True,
                        help="a LoCoMo-format .json file (or the folder holding one)")
    parser.add_argument("--conversations", help="only these conversation ids (comma-separated)")
    parser.add_argument("--split", choices=dataset.SPLITS, default="all",
                        help="over the conversation ids in sorted order, place i is dev when "
                             "i %% 5 < 3, test otherwise (default: all)")
    parser.add_argument("--limit-questions", type=int, help="the first N questions of each conversation")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--details", type=Path, metavar="FILE",
                        help="write each question with each system's ranked dialog ids (JSON lines)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="run in DIR and keep it")
    args = parser.parse_args(argv)
    if args.limit_questions is not None and args.limit_questions < 1:
        parser.error("--limit-questions is at least 1")
    return args


def served(conversations: list[Conversation], folder: Path, limit: int | None,
           report: Report) -> None:
    """Ingest, settle and ask through a throwaway ``serve``; stopped whatever happens."""
    server = start_server(folder, folder / "serve.log", NO_EXTRACTION)
    progress(f"serve at {server.url} (pid {server.process.pid})")
    try:
        tenants = drive.tenants_for(conversations, folder, uuid.uuid4().hex[:4])
        started, done = time.monotonic(), 0
        for tenant in tenants:
            drive.ingest(server.url, tenant, done, started)
            done += len(tenant.conversation.turns)
        seconds = time.monotonic() - started
        settled = drive.settle(server.url, tenants, folder)
        progress(f"{done} turns projected and embedded {settled:.0f} s after the last call")
        asked = [0]
        report.answers["palimpsest"] = [a for t in tenants
                                        for a in drive.ask(server.url, t, limit, asked)]
        report.run.update(ingest_turns_per_s=round(done / seconds, 1), settle_s=round(settled, 1),
                          unmapped_results=sum(t.unmapped for t in tenants))
    finally:
        progress(f"serve stopped in {stop_server(server):.1f} s")
        stop_embedded(folder / "data")  # left running when a second Ctrl-C cut serve's stop short


def baseline_answers(conversations: list[Conversation], limit: int | None,
                     report: Report) -> None:
    """BM25 and the encoder alone, each conversation its own collection, the same turn texts."""
    embedder = baselines.server_embedder()
    report.encoder = embedder.model
    bm25: list[Answer] = []
    encoder: list[Answer] = []
    for conversation in conversations:
        texts = [t.text for t in conversation.turns]
        ids = [t.dia_id for t in conversation.turns]
        questions = conversation.questions[:limit]
        index = baselines.BM25(texts)
        for q in questions:
            started = time.perf_counter()
            top = index.top(q.question, 10)
            ms = (time.perf_counter() - started) * 1000
            bm25.append(Answer(q.category, q.evidence, tuple(ids[i] for i in top), ms))
        started = time.monotonic()
        nearest = baselines.cosine_top(baselines.embed(embedder, texts),
                                       baselines.embed(embedder, [q.question for q in questions]), 10)
        progress(f"  {conversation.id}: encoder alone embedded {len(texts)} turns and "
                 f"{len(questions)} questions in {time.monotonic() - started:.0f} s")
        encoder.extend(Answer(q.category, q.evidence, tuple(ids[i] for i in top))
                       for q, top in zip(questions, nearest, strict=True))
    report.answers["bm25"], report.answers["encoder"] = bm25, encoder


def write_details(path: Path, conversations: list[Conversation], limit: int | None,
                  report: Report) -> None:
    """One JSON line per question: its conversation, text, category, evidence and each system's
    ranked dialog ids (to read the misses)."""
    questions = [(c.id, q) for c in conversations for q in c.questions[:limit]]
    with path.open("w", encoding="utf-8") as out:
        for n, (conversation, question) in enumerate(questions):
            line = {"conversation": conversation, "question": question.question,
                    "category": question.category, "evidence": list(question.evidence),
                    **{name: list(answers[n].ranked) for name, answers in report.answers.items()}}
            out.write(json.dumps(line, ensure_ascii=False) + "\n")


def benchmark(args: argparse.Namespace) -> Report:
    only = [c.strip() for c in args.conversations.split(",") if c.strip()] if args.conversations else None
    conversations = dataset.load(args.dataset, args.split, only)
    if not conversations:
        raise SystemExit(f"no conversation in the {args.split} split of {args.dataset}")
    report = Report(str(args.dataset), args.split, [c.id for c in conversations],
                    sum(len(c.turns) for c in conversations), encoder="")
    progress(f"{len(conversations)} conversations, {report.turns} turns, "
             f"{sum(len(c.questions[:args.limit_questions]) for c in conversations)} questions")
    with bench_folder(args.keep, bool(args.keep), "palimpsest-bench-conversations-") as folder:
        served(conversations, folder, args.limit_questions, report)
    baseline_answers(conversations, args.limit_questions, report)
    report.notes += ["route breakers lifted in serve (every route runs on every question)",
                     "latency: Palimpsest's over REST, client side; BM25's in process"]
    if args.details:
        write_details(args.details, conversations, args.limit_questions, report)
    return report


_stopping: list[int] = []


def _interrupt(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM: stop the run, serve with it (the ``finally`` blocks)."""
    _stopping.append(signum)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = sys.stdout
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with redirect_stdout(sys.stderr):  # what the helpers print is progress, not output
            result = benchmark(args)
    except Exception:
        if not _stopping:
            raise
        progress("interrupted")  # serve, stopped by the same Ctrl-C, broke a call first
        return 130
    except KeyboardInterrupt:
        progress("interrupted")
        return 130
    if args.json:
        print(json.dumps(to_json(result), ensure_ascii=False, indent=1), file=out)
    else:
        print(table(result), file=out)
    return 0
