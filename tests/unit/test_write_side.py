"""The write-side scenarios on the in-memory event store."""

import pytest

from infra.settings import Settings
from services.factory import create_app
from tests.scenarios import WriteSideScenarios


class TestInMemory(WriteSideScenarios):
    @pytest.fixture
    def make_app(self):  # type: ignore[no-untyped-def]
        return lambda clock: create_app(Settings(persistence="memory"), clock=clock)
