"""``tests/integration/test_parity.py`` against the containers (see conftest.py)."""

from tests.integration.test_parity import *  # noqa: F403
