"""``tests/integration/test_pipeline.py`` against the containers (see conftest.py)."""

from tests.integration.test_pipeline import *  # noqa: F403
