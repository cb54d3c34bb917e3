"""``tests/integration/test_tenancy_matrix.py`` against the containers (see conftest.py)."""

from tests.integration.test_tenancy_matrix import *  # noqa: F403
