"""``tests/integration/test_mcp.py`` against the containers (see conftest.py)."""

from tests.integration.test_mcp import *  # noqa: F403
