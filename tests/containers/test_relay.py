"""``tests/integration/test_relay.py`` against the containers (see conftest.py)."""

from tests.integration.test_relay import *  # noqa: F403
