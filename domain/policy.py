"""The numbers the write side decides by. Every one is a setting; these are the defaults."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Policy:
    #: Longest content, description, title or body a card may carry, in characters.
    max_content_chars: int = 8_000
    #: Most tags a knowledge or event card may carry, and the longest tag.
    max_tags: int = 64
    max_tag_chars: int = 64
    #: How far in the future a valid_from / occurred_at may lie before it is refused.
    clock_skew: timedelta = timedelta(minutes=5)
    #: A second write in the same session within this window is a same-turn self-correction.
    turn_window: timedelta = timedelta(minutes=2)
    #: At this many changes to a slot in the trailing window, a conflicting write is queued.
    high_frequency_changes: int = 3
    frequency_window: timedelta = timedelta(days=30)
    #: A conflicting write whose valid_from reaches this far back is queued.
    large_span: timedelta = timedelta(days=30)
