"""``tests/integration/test_client.py`` against the containers (see conftest.py)."""

from tests.integration.test_client import *  # noqa: F403
