"""``tests/integration/test_locale_check.py`` against the containers (see conftest.py)."""

from tests.integration.test_locale_check import *  # noqa: F403
