"""``tests/integration/test_bench_aging.py`` against the containers (see conftest.py)."""

from tests.integration.test_bench_aging import *  # noqa: F403
