"""``tests/integration/test_retrieval.py`` against the containers (see conftest.py)."""

from tests.integration.test_retrieval import *  # noqa: F403
