"""``python -m tests.benchmarks.aging``."""

from tests.benchmarks.aging.run import main

raise SystemExit(main())
