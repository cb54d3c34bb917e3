"""``make soak``: the whole-system state machine (tests/machine.py) for at least 10,000 steps on
its own embedded PostgreSQL and broker, divergences counted rather than stopping the run.

    python -m tests.benchmarks.soak [--steps 10000] [--per-example 50] [--seed N]

Prints progress, then steps, examples, divergences (the first few described), broker kills,
rebuilds, comparisons, the time taken and the batches an error of the harness itself stopped (a
Kafka client that gave up, say: not a divergence of the read models); exits 1 when anything
diverged."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from infra.embedded_pg import stop_embedded
from infra.postgres import admin_database, bootstrap, runtime_database
from infra.settings import Settings
from tests.machine import SystemMachine, start_env


def described(error: BaseException) -> str:
    """An error and, for Hypothesis's groups (a flaky failure wraps what it met), what is inside."""
    inner = [described(e) for e in getattr(error, "exceptions", ())]
    head = f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:160]}"
    return head + (f" [{'; '.join(inner)}]" if inner else "")


def run_batch(batch: settings) -> None:
    run_state_machine_as_test(SystemMachine, settings=batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000, help="at least this many steps")
    parser.add_argument("--per-example", type=int, default=50, help="steps per example")
    parser.add_argument("--rebuild-every", type=int, default=200,
                        help="steps between two rebuilds (each replays the whole log)")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # every refused connection of a kill

    folder = Path(tempfile.mkdtemp(prefix="palimpsest-soak-"))
    config = Settings(persistence="postgres", data_dir=folder, auto_bootstrap=False)
    print(f"soak: data folder {folder}; starting PostgreSQL and the broker", flush=True)
    admin = admin_database(config)
    bootstrap(admin, config)
    env = start_env(config, admin, runtime_database(admin, config), folder / "kafka")
    SystemMachine.env, SystemMachine.strict = env, False
    SystemMachine.rebuild_every = args.rebuild_every
    started, examples = time.monotonic(), 0
    errors: list[str] = []
    try:
        while env.steps < args.steps:
            batch = settings(max_examples=10, stateful_step_count=args.per_example,
                             deadline=None, database=None, derandomize=False,
                             suppress_health_check=list(HealthCheck))
            try:
                if args.seed is not None:
                    seed(args.seed + examples)(run_batch)(batch)
                else:
                    run_batch(batch)
            except Exception as error:  # of the harness, not a divergence: said, and counted
                errors.append(described(error))
            examples += 10
            elapsed = time.monotonic() - started
            print(f"  {env.steps:>6} steps  {examples:>4} examples  {len(env.divergences)} "
                  f"divergences  {env.kills} broker kills  {env.rebuilds} rebuilds  "
                  f"{elapsed:6.0f} s", flush=True)
    finally:
        env.close()
        stop_embedded(folder)
    elapsed = time.monotonic() - started
    print(f"\nsteps {env.steps}, examples {examples}, divergences {len(env.divergences)}, "
          f"broker kills {env.kills}, rebuilds {env.rebuilds}, comparisons {env.checks}, "
          f"time {elapsed:.0f} s ({env.steps / elapsed:.1f} steps/s); batches stopped by an error "
          f"of the harness: {len(errors)}")
    for error in errors[:5]:
        print(f"  harness error: {error}")
    for divergence in env.divergences[:10]:
        print(f"  diverged: {divergence}")
    return 1 if env.divergences else 0


if __name__ == "__main__":
    sys.exit(main())
