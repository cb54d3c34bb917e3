"""``tests/integration/test_slicing.py`` against the containers (see conftest.py)."""

from tests.integration.test_slicing import *  # noqa: F403
