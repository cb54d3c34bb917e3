"""``tests/integration/test_embedding_projection.py`` against the containers (see conftest.py)."""

from tests.integration.test_embedding_projection import *  # noqa: F403
