"""``tests/integration/test_cli_remote.py`` against the containers (see conftest.py)."""

from tests.integration.test_cli_remote import *  # noqa: F403
