"""``tests/integration/test_projections.py`` against the containers (see conftest.py)."""

from tests.integration.test_projections import *  # noqa: F403
