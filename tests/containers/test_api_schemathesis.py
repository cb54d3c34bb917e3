"""``tests/integration/test_api_schemathesis.py`` against the containers (see conftest.py)."""

from tests.integration.test_api_schemathesis import *  # noqa: F403
