"""``python -m tests.benchmarks.conversations``."""

from tests.benchmarks.conversations.run import main

raise SystemExit(main())
