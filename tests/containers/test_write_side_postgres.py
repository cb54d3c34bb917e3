"""``tests/integration/test_write_side_postgres.py`` against the containers (see conftest.py)."""

from tests.integration.test_write_side_postgres import *  # noqa: F403
