"""The command line: the model, ``palimpsest serve`` behind the proxy, each split, the report."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from collections import Counter
from contextlib import redirect_stdout
from dataclasses import replace
from pathlib import Path

from tests.benchmarks.bench_api import Server, start_server, stop_server
from tests.benchmarks.folders import bench_folder
from tests.benchmarks.ingest_quality import dataset, report
from tests.benchmarks.ingest_quality.dataset import Conversation, TurnIndex
from tests.benchmarks.ingest_quality.drive import (
    Code,
    Watch,
    ingest,
    make_keys,
    progress,
    read_back,
    tenant_of,
    wait,
)
from tests.benchmarks.ingest_quality.metrics import Quality, RunFigures, quality, split_details
from tests.benchmarks.ingest_quality.proxy import Forward, Proxy, Replay, Scripted, Source
from tests.benchmarks.ingest_quality.scripted import ScriptedModel

#: Seconds with no turn done and no model answer before a run gives up, by the model's kind; a
#: slow model's longest answer so far, tripled, raises it.
STALL = {"scripted": 120.0, "replay": 120.0, "endpoint": 600.0}
#: The server's timeout for one call to a real model, unless the environment sets one: a small
#: local model answering several turns at once takes minutes.
ENDPOINT_TIMEOUT = "600"
#: The server settings of ``--lift-arbitration``. The conversations are months old: to the write
#: rules, each change to a slot rewrites history that far back (large span), and a slot changed
#: three times in one run changes at a high frequency; both queue the change for a person.
LIFTED_ARBITRATION = {"PALIMPSEST_LARGE_SPAN_DAYS": "100000", "PALIMPSEST_HIGH_FREQUENCY_CHANGES": "1000"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.benchmarks.ingest_quality",
        description="How well raw conversation turns become slots through the ingest path "
                    "(turn → extraction model → candidates → Remember → slots), against ground truth.")
    parser.add_argument("--split", choices=("dev", "test", "both"), default="dev")
    parser.add_argument("--model", default="scripted",
                        help="'scripted' (answers from the ground truth, labels drifting) or the base "
                             "URL of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8767/v1")
    parser.add_argument("--llm-model", help="the model's name at the endpoint (with a URL)")
    parser.add_argument("--record", type=Path, help="write every model answer, by conversation and "
                                                    "turn, to this file")
    parser.add_argument("--replay", type=Path, help="answer from a recording instead of a model")
    parser.add_argument("--checkout", type=Path, help="serve from another checkout of the project "
                                                      "(a git worktree of an older commit; same venv)")
    parser.add_argument("--dataset", type=Path, default=dataset.CONVERSATIONS,
                        help="the folder holding dev.json and test.json (default: the benchmark's own)")
    parser.add_argument("--conversations", type=int, help="only the first N conversations of each split")
    parser.add_argument("--stall", type=float, help="give up when nothing moved for this many seconds "
                                                    "(default 120, 600 with a real model)")
    parser.add_argument("--lift-arbitration", action="store_true",
                        help="lift the arbitration queue's large-span and high-frequency rules in the "
                             "server, so each change applies as it would have when it was said")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--details", type=Path, help="write each fact split over two or more "
                        "slots, with its cards, to this file (to read the dev split's misses)")
    parser.add_argument("--data-dir", type=Path, help="default: a temporary folder, removed at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    args = parser.parse_args(argv)
    if args.replay and args.model != "scripted":
        parser.error("--replay answers from a recording: give no --model with it")
    if args.model != "scripted" and not args.model.startswith(("http://", "https://")):
        parser.error("--model is 'scripted' or an endpoint's base URL (http://…/v1)")
    if args.model.startswith("http") and not args.llm_model:
        parser.error("--llm-model names the model at the endpoint (e.g. qwen15)")
    return args


def conversations_of(args: argparse.Namespace) -> dict[str, list[Conversation]]:
    splits = dataset.SPLITS if args.split == "both" else (args.split,)
    return {split: dataset.load(split, args.dataset / f"{split}.json")[:args.conversations]
            for split in splits}


def source_of(args: argparse.Namespace,
              data: dict[str, list[Conversation]]) -> tuple[Source, str, str, str]:
    """(the proxy's source, the model's name, what answers, its kind for :data:`STALL`)."""
    if args.replay:
        replayed = Replay(args.replay)
        return replayed, replayed.model, f"replay of {args.replay}", "replay"
    if args.model == "scripted":
        every = [c for conversations in data.values() for c in conversations]
        return Scripted(ScriptedModel(every)), "scripted", "scripted from the ground truth", "scripted"
    return Forward(args.model), args.llm_model, args.model, "endpoint"


def run_split(split: str, conversations: list[Conversation], proxy: Proxy, server: Server,
              code: Code, folder: Path, stall: float, details: list[str]) -> report.SplitResult:
    proxy.index = TurnIndex.of(conversations)
    run = uuid.uuid4().hex[:4]
    tenants = {tenant_of(c, run): c for c in conversations}
    keys = make_keys(code, folder, list(tenants))
    turns = sum(len(c.turns) for c in conversations)
    progress(f"[{split}] {len(conversations)} conversations, {turns} turns, a tenant each")
    before = replace(proxy.stats)
    with Watch(server.url, keys, {t: len(c.turns) for t, c in tenants.items()}) as watch:
        started = time.monotonic()
        ingest(server.url, keys, tenants)
        ended = wait(watch, split, stall=lambda: max(stall, 3 * proxy.stats.longest),
                     activity=lambda: proxy.stats.last_answer,
                     calls=lambda: proxy.stats.calls - before.calls)
    per: dict[str, Quality] = {}
    dead = candidates = written = 0
    queued: Counter[str] = Counter()
    for tenant, conversation in tenants.items():
        back = read_back(server.url, keys[tenant])
        per[conversation.id] = quality(conversation, back.cards)
        details.extend(split_details(conversation, back.cards))
        dead, candidates, written = (dead + back.dead_letters, candidates + back.candidates,
                                     written + back.written)
        queued.update(back.queued)
    after = proxy.stats
    run_figures = RunFigures(
        turns=turns, seconds=ended - started, calls=after.calls - before.calls,
        prompt_tokens=after.prompt_tokens - before.prompt_tokens,
        completion_tokens=after.completion_tokens - before.completion_tokens,
        estimated=after.estimated - before.estimated, dead_letters=dead,
        unknown=after.unknown - before.unknown, candidates=candidates, written=written,
        queued=dict(queued.most_common()))
    return report.SplitResult(split, sum(per.values(), Quality()), run_figures, per)


def benchmark(args: argparse.Namespace) -> report.Report:
    """Run the splits asked for; the report (progress on stderr)."""
    data = conversations_of(args)
    source, model, answered_by, kind = source_of(args, data)
    code = Code(args.checkout.resolve() if args.checkout else None)
    result = report.Report(model=model, source=answered_by, code=code.describe())
    stall = args.stall or STALL[kind]
    details: list[str] = []
    with bench_folder(args.data_dir, args.keep, "palimpsest-bench-ingest-quality-") as folder, \
            Proxy(source, TurnIndex(), model) as proxy:
        extra = {"PALIMPSEST_LLM_BASE_URL": proxy.base_url, "PALIMPSEST_LLM_MODEL": model}
        if kind == "endpoint" and "PALIMPSEST_LLM_TIMEOUT_SECONDS" not in os.environ:
            extra["PALIMPSEST_LLM_TIMEOUT_SECONDS"] = ENDPOINT_TIMEOUT
        if code.root is not None:
            extra["PYTHONPATH"] = str(code.root)
        if args.lift_arbitration:
            extra.update(LIFTED_ARBITRATION)
            result.notes.append("arbitration lifted: " + ", ".join(
                f"{k}={v}" for k, v in LIFTED_ARBITRATION.items()))
        try:
            server = start_server(folder, folder / "serve.log", extra, cwd=code.root)
            progress(f"serve at {server.url} (pid {server.process.pid}, code {result.code}); "
                     f"model {model} ({answered_by}) behind the proxy at {proxy.base_url}")
            try:
                for split, conversations in data.items():
                    result.splits[split] = run_split(split, conversations, proxy, server, code,
                                                     folder, stall, details)
            finally:
                progress(f"serve stopped in {stop_server(server):.1f} s")
        finally:
            if args.details:
                args.details.write_text("".join(line + "\n" for line in details), encoding="utf-8")
            if args.record:
                proxy.save(args.record, answered_by)
                progress(f"recorded {proxy.stats.calls} answers to {args.record}")
    return result


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops the run as Ctrl-C does: serve and the proxy with it


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = sys.stdout
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with redirect_stdout(sys.stderr):  # what the helpers print is progress, not output
            result = benchmark(args)
    except KeyboardInterrupt:
        progress("interrupted")
        return 130
    if args.json:
        print(json.dumps(report.to_json(result), ensure_ascii=False, indent=1), file=out)
    else:
        print(report.table(result), file=out)
    return 0
