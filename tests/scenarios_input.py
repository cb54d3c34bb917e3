"""Input hygiene at the command boundary (DESIGN §4, RELIABILITY "Tenants and input"), run on every
backend through :class:`tests.scenarios.WriteSideScenarios`: every text field of every command ×
every bad input → an ``InvalidTextError`` naming the field, and nothing stored."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, get_args, get_origin
from uuid import uuid4

import pytest
from pydantic import BaseModel, ValidationError

from domain.errors import InvalidTextError
from services.command.commands import (
    Arbitrate,
    CorrectEvent,
    Link,
    Merge,
    Move,
    Remember,
    Rename,
    Revise,
    Verify,
)
from services.command.memory import Palimpsest
from tests.support import stored_count

#: Each command with a valid body and the call that runs it (targets need not exist: the text is
#: checked before anything is loaded).
COMMANDS: dict[type[BaseModel], tuple[dict[str, Any], Callable[[Palimpsest, str, Any], Any]]] = {
    Remember: ({"kind": "state", "memory_type": "fact", "subject": "user", "label": "address",
                "content": "Taipei", "title": "home", "tags": ("city",), "owner": "henry",
                "item_key": "home", "cardinality": "single_value", "agent_id": "a1",
                "session_id": "s1", "turn_id": "t1", "request_id": "r1"},
               lambda app, tenant, c: app.remember(tenant, c)),
    Revise: ({"card_id": uuid4(), "content": "Kyoto"},
             lambda app, tenant, c: app.revise(tenant, uuid4(), c)),
    Verify: ({}, lambda app, tenant, c: app.verify(tenant, uuid4(), c)),
    CorrectEvent: ({"card_id": uuid4(), "description": "Kickoff", "reason": "typo"},
                   lambda app, tenant, c: app.correct(tenant, c)),
    Rename: ({"card_id": uuid4(), "title": "JWT"}, lambda app, tenant, c: app.rename(tenant, c)),
    Merge: ({"card_id": uuid4(), "into": uuid4()}, lambda app, tenant, c: app.merge(tenant, c)),
    Link: ({"card_id": uuid4(), "edge": "related_to", "target_id": uuid4()},
           lambda app, tenant, c: app.link(tenant, c)),
    Arbitrate: ({"case_id": uuid4(), "decision": "keep_old", "decided_by": "henry"},
                lambda app, tenant, c: app.arbitrate(tenant, c)),
    Move: ({"card_id": uuid4(), "to": "wait"}, lambda app, tenant, c: app.move(tenant, c)),
}

BAD_TEXT = {
    "nul": "A\x00B",
    "high-surrogate": "A\ud800",
    "low-surrogate": "\udc00B",
    "escape": "\x1b[31mred",
    "delete": "A\x7f",
    "c1-control": "A\x9bB",
}


def text_fields(model: type[BaseModel]) -> Iterator[tuple[str, bool]]:
    """(name, holds a tuple of texts) of every text field: a field added later is covered too."""
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if get_origin(annotation) is tuple:
            if get_args(annotation)[0] is str:
                yield name, True
        elif annotation is str or str in get_args(annotation):
            yield name, False


FIELDS = [(model, name, many) for model in COMMANDS for name, many in text_fields(model)]


def command_with(model: type[BaseModel], field: str, value: Any) -> Any:
    """The command with ``value`` in ``field``. Pydantic itself refuses a lone surrogate in a
    length-checked field (naming it); the service must refuse one built without validation too."""
    data = {**COMMANDS[model][0], field: value}
    try:
        return model(**data)
    except ValidationError as error:
        assert [e["loc"][0] for e in error.errors()] == [field]
        return model.model_construct(**data)


class InputScenarios:
    def refused(self, app: Palimpsest, tenant: str, command: Any, field: str) -> None:
        before = stored_count(app)
        with pytest.raises(InvalidTextError) as raised:
            COMMANDS[type(command)][1](app, tenant, command)
        assert raised.value.field == field and field in str(raised.value)
        assert stored_count(app) == before

    def test_every_text_field_is_covered(self) -> None:
        assert len(FIELDS) > 40 and (Remember, "tags", True) in FIELDS

    @pytest.mark.parametrize("bad", list(BAD_TEXT.values()), ids=list(BAD_TEXT))
    @pytest.mark.parametrize(("model", "field", "many"), FIELDS,
                             ids=[f"{m.__name__}.{f}" for m, f, _ in FIELDS])
    def test_bad_text_in_any_field_is_refused_naming_it(self, app, tenant, model, field, many,
                                                         bad) -> None:
        value = ("fine", bad) if many else bad
        self.refused(app, tenant, command_with(model, field, value), f"{field}[1]" if many else field)

    @pytest.mark.parametrize(("field", "value", "named"), [
        ("subject", "user/a", "subject"), ("label", "a/b", "label"), ("label", "  ", "label"),
        ("subject", "\t", "subject"), ("tags", ("ok", ""), "tags[1]"), ("tags", ("   ",), "tags[0]"),
    ])
    def test_a_slash_in_a_slot_name_or_an_empty_tag_is_refused(self, app, tenant, field, value,
                                                               named) -> None:
        self.refused(app, tenant, command_with(Remember, field, value), named)

    def test_newlines_tabs_and_crlf_are_text(self, app, tenant) -> None:
        from domain.event_card import EventCard

        content = "line one\r\nline two\n\tindented"
        result = app.remember(tenant, Remember(kind="event", memory_type="event", content=content,
                                               tags=("多行",)))
        assert app.load(tenant, result.card_id, EventCard).description == content
