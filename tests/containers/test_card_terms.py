"""``tests/integration/test_card_terms.py`` against the containers (see conftest.py)."""

from tests.integration.test_card_terms import *  # noqa: F403
