"""The command line: options, a throwaway embedded PostgreSQL, the run, the outputs."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from infra.postgres import admin_database, bootstrap, stop_embedded
from infra.settings import Settings
from tests.benchmarks.aging import phrasings, report
from tests.benchmarks.aging.generator import Config, generate
from tests.benchmarks.aging.questions import QUICK, Budget
from tests.benchmarks.aging.runner import benchmark, progress

QUICK_CHECKPOINTS = (60, 365)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.aging",
                                     description="Longitudinal retrieval benchmark: the true value first, "
                                                 "as memories age, against baselines.")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tenants", type=int, help="default 4 (--quick: 2)")
    parser.add_argument("--persons", type=int, help="persons in all, default 44 (--quick: 5)")
    parser.add_argument("--projects", type=int, help="default 8 (--quick: 1)")
    parser.add_argument("--quick", action="store_true",
                        help="2 tenants, 6 subjects (test split: 2 tenants of 3 people), 2 checkpoints, "
                             "few questions: a smoke run")
    parser.add_argument("--out", type=Path, default=Path("bench-results"),
                        help="where aging.json and the plots go")
    parser.add_argument("--data-dir", type=Path,
                        help="PostgreSQL data folder (default: a temporary one, removed)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary data folder")
    parser.add_argument("--phrasings", choices=tuple(phrasings.SOURCES), default="builtin",
                        help="the paraphrases asked (label not named): built-in or the held-out set")
    parser.add_argument("--without-lexicon", action="store_true",
                        help="also ask Palimpsest with the retrieval lexicon off "
                             "(PALIMPSEST_RETRIEVAL__LEXICON=false), beside it")
    parser.add_argument("--patient", action="store_true",
                        help="breakers lifted and route budgets wide (default: the settings a user runs)")
    return parser.parse_args(argv)


def configure(args: argparse.Namespace) -> tuple[Config, Budget]:
    quick = args.quick
    config = Config(seed=args.seed, tenants=args.tenants or (2 if quick else 4),
                    persons=args.persons or (5 if quick else 44),
                    projects=args.projects or (1 if quick else 8),
                    checkpoints=QUICK_CHECKPOINTS if quick else Config.checkpoints,
                    prefix=f"aging-{uuid.uuid4().hex[:6]}", test_persons=3 if quick else Config.test_persons)
    return config, QUICK if quick else Budget()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    phrasings.SOURCE = args.phrasings
    config, budget = configure(args)
    started = time.perf_counter()
    corpus = generate(config)
    folder = args.data_dir or Path(tempfile.mkdtemp(prefix="palimpsest-bench-aging-"))
    settings = Settings(persistence="postgres", data_dir=folder / "data", auto_bootstrap=True)
    progress(f"corpus (seed {config.seed}): {corpus.size()}; data folder {folder}")
    try:
        admin = admin_database(settings)
        bootstrap(admin, settings)
        settings = settings.model_copy(update={"auto_bootstrap": False})
        result = benchmark(corpus, settings, admin, budget=budget, patient=args.patient,
                           without_lexicon=args.without_lexicon)
        report.print_summary(result)
        for path in report.write(result, args.out):
            print(f"wrote {path}")
    except KeyboardInterrupt:
        progress("interrupted")
        return 130
    finally:
        if settings.database_url is None:
            stop_embedded(settings.data_dir)
        if args.data_dir is None and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    progress(f"done in {time.perf_counter() - started:.0f} s")
    return 0
