"""What a personal text reads as once its key is destroyed (DESIGN §7, decision 0012).

An erased field is not a value anyone wrote: :data:`ERASED` is a ``str`` of its own type, so the
rules can tell it from every text a caller could send — an erased value equals nothing, not even
another erased value, and an erased item key names no item.
"""

from __future__ import annotations


class Erased(str):
    """A personal text whose erasure unit was forgotten."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ERASED"


#: The one erased text: ``is_erased`` tells it by type, never by its characters.
ERASED = Erased("[erased]")


def is_erased(text: object) -> bool:
    return isinstance(text, Erased)
