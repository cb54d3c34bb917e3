"""``tests/integration/test_api_contract.py`` against the containers (see conftest.py)."""

from tests.integration.test_api_contract import *  # noqa: F403
