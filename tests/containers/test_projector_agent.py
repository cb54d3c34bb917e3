"""``tests/stream/test_projector_agent.py`` against the containers (see conftest.py)."""

from tests.stream.test_projector_agent import *  # noqa: F403
