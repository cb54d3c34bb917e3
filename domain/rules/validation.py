"""Checks every command passes before any event is made."""

from __future__ import annotations

from datetime import datetime

from domain.errors import (
    ContentTooLargeError,
    EmptyContentError,
    FutureTimeError,
    InvalidTimeError,
    ValidityOrderError,
)
from domain.policy import Policy


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
