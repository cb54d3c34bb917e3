"""``palimpsest rebuild``: the whole log replayed into a fresh schema, checked, and swapped in
while queries go on (:func:`projections.replay.rebuild`), on the command side opened for it."""

from __future__ import annotations

from datetime import datetime

from infra.settings import Settings
from projections.fold import Progress
from projections.replay import RebuildReport, rebuild
from services.factory import create_app


def run_rebuild(settings: Settings, *, known_at: datetime | None = None, into: str | None = None,
                workers: int | None = None, progress: Progress | None = None) -> RebuildReport:
    """Rebuild the read models (as known at ``known_at``, or into ``into``: nothing swapped);
    ``progress`` is told (events done, events in all) as the replay goes."""
    app = create_app(settings)
    try:
        return rebuild(settings, app, known_at=known_at, into=into, progress=progress, workers=workers)
    finally:
        app.close()
