"""``tests/integration/test_retrieval_golden.py`` against the containers (see conftest.py)."""

from tests.integration.test_retrieval_golden import *  # noqa: F403
