"""``tests/integration/test_embedding_cache.py`` against the containers (see conftest.py)."""

from tests.integration.test_embedding_cache import *  # noqa: F403
