"""How the domain's value objects travel inside stored events (JSON, via eventsourcing)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Transcoding

from domain.cards import StateCard
from domain.values import Provenance, Scope


class DataclassAsDict(Transcoding):
    """A frozen dataclass as a dict of its fields; nested values use their own transcodings."""

    def __init__(self, cls: type, name: str) -> None:
        self.type = cls
        self.name = name
        self._fields = tuple(f.name for f in fields(cls))
        self._known = frozenset(self._fields)

    def encode(self, obj: Any) -> dict[str, Any]:
        return {name: getattr(obj, name) for name in self._fields}

    def decode(self, data: dict[str, Any]) -> Any:
        if data.keys() <= self._known:
            return self.type(**data)
        return self.type(**{k: v for k, v in data.items() if k in self._known})  # a field gone


def register_domain_transcodings(transcoder: JSONTranscoder) -> None:
    transcoder.register(DataclassAsDict(StateCard, "state_card"))
    transcoder.register(DataclassAsDict(Provenance, "provenance"))
    transcoder.register(DataclassAsDict(Scope, "scope"))
