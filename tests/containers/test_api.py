"""``tests/integration/test_api.py`` against the containers (see conftest.py)."""

from tests.integration.test_api import *  # noqa: F403
