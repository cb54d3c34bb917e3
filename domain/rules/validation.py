"""Checks every command passes before any event is made.

:func:`check_fields` is the text hygiene of the command boundary (DESIGN §4): the application runs
it on every command, and the query side on what it is asked, before anything is computed or stored.
A NUL byte stored in an event stays in the log forever and PostgreSQL's ``text`` refuses it later
(in a projection, a replay); a lone surrogate cannot be encoded at all; other control characters
are never meant and can hide text from a reader.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import datetime

from domain.errors import (
    ContentTooLargeError,
    EmptyContentError,
    FutureTimeError,
    InvalidTextError,
    InvalidTimeError,
    ValidityOrderError,
)
from domain.policy import Policy

#: C0 and C1 control characters but tab and newline (a carriage return only as the first half of a
#: CRLF line end, which browsers and Windows clients send), and lone surrogates.
_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]|\r(?!\n)")
#: Fields that name a slot: ``subject/label`` must stay one address (``history user/address``).
SLOT_FIELDS = frozenset({"subject", "label"})
#: Fields whose every item is a tag: an empty tag names nothing.
TAG_FIELDS = frozenset({"tags"})


def check_fields(fields: Mapping[str, object]) -> None:
    """Every text in ``fields`` (a command's or a query's, by field name), nested in tuples, lists
    and mappings too, holds no NUL byte, lone surrogate or control character; a subject or label
    holds no ``/`` and is not blank; no tag is blank. Raises :class:`InvalidTextError` naming the
    first field that fails."""
    for name, value in fields.items():
        for path, text in _texts(name, value):
            check_text(text, path)
            if name in TAG_FIELDS and not text.strip():
                raise InvalidTextError(f"{path} is an empty tag", path)
        if name in SLOT_FIELDS and isinstance(value, str):
            check_slot_part(value, name)


def check_text(text: str, field: str) -> str:
    found = _FORBIDDEN.search(text)
    if found is None:
        return text
    char, at = found.group()[0], found.start()
    if "\ud800" <= char <= "\udfff":
        raise InvalidTextError(f"{field} holds a lone surrogate U+{ord(char):04X} at character {at}: "
                               "not Unicode text", field)
    what = "a NUL byte" if char == "\x00" else f"the control character U+{ord(char):04X}"
    raise InvalidTextError(f"{field} holds {what} at character {at}; text may hold newlines and "
                           "tabs, no other control character", field)


def check_slot_part(text: str, field: str) -> str:
    if "/" in text:
        raise InvalidTextError(f"{field} {text!r} holds a '/': subject/label names a slot", field)
    if not text.strip():
        raise InvalidTextError(f"{field} is empty", field)
    return text


def _texts(path: str, value: object) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _texts(f"{path}.{key}", key)
            yield from _texts(f"{path}.{key}", item)
    elif isinstance(value, tuple | list | set | frozenset):
        for i, item in enumerate(value):
            yield from _texts(f"{path}[{i}]", item)


def check_content(text: str, policy: Policy, what: str = "content") -> str:
    if not isinstance(text, str) or not text.strip():
        raise EmptyContentError(f"{what} is empty")
    if len(text) > policy.max_content_chars:
        raise ContentTooLargeError(
            f"{what} has {len(text)} characters; the limit is {policy.max_content_chars}"
        )
    return text.strip()


def check_aware(moment: datetime, what: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise InvalidTimeError(f"{what} needs a time zone (ISO 8601 with an offset, e.g. +08:00)")
    return moment


def check_not_future(moment: datetime, now: datetime, policy: Policy, what: str) -> datetime:
    check_aware(moment, what)
    if moment > now + policy.clock_skew:
        raise FutureTimeError(
            f"{what} {moment.isoformat()} lies in the future (now {now.isoformat()}, "
            f"tolerance {policy.clock_skew})"
        )
    return moment


def check_validity(
    valid_from: datetime, valid_to: datetime | None, now: datetime, policy: Policy
) -> None:
    check_not_future(valid_from, now, policy, "valid_from")
    if valid_to is not None:
        check_aware(valid_to, "valid_to")
        if valid_to <= valid_from:
            raise ValidityOrderError(
                f"valid_to {valid_to.isoformat()} is not after valid_from {valid_from.isoformat()}"
            )
