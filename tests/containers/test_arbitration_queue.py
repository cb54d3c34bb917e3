"""``tests/integration/test_arbitration_queue.py`` against the containers (see conftest.py)."""

from tests.integration.test_arbitration_queue import *  # noqa: F403
