"""``tests/integration/test_ranking.py`` against the containers (see conftest.py)."""

from tests.integration.test_ranking import *  # noqa: F403
