"""``python -m tests.benchmarks.ingest_quality``."""

from tests.benchmarks.ingest_quality.run import main

raise SystemExit(main())
