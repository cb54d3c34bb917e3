"""``tests/integration/test_poison.py`` against the containers (see conftest.py)."""

from tests.integration.test_poison import *  # noqa: F403
