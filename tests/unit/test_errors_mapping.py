"""Every error Palimpsest raises on purpose has its own HTTP status and stable code at the edge:
a new error class cannot be forgotten (answered by an ancestor's code without anyone deciding)."""

from __future__ import annotations

import importlib
import pkgutil

import psycopg
import pytest
from pydantic import BaseModel, ValidationError

from domain import errors as e
from services.entrypoints.errors import STATUS, answer, tool_error_text

PACKAGES = ("domain", "infra", "projections", "services")


def _every_error() -> list[type[e.PalimpsestError]]:
    for package in PACKAGES:
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, package + "."):
            importlib.import_module(module.name)
    found, todo = [], [e.PalimpsestError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_is_listed() -> None:
    unlisted = [f"{cls.__module__}.{cls.__qualname__}" for cls in _every_error() if cls not in STATUS]
    assert unlisted == []


def test_codes_are_distinct_and_statuses_are_errors() -> None:
    codes = [code for _, code in STATUS.values()]
    assert len(codes) == len(set(codes))
    assert all(400 <= status < 600 for status, _ in STATUS.values())


@pytest.mark.parametrize(("error", "status", "code"), [
    (e.CardNotFoundError("no card 1"), 404, "card_not_found"),
    (e.ArbitrationCaseNotFoundError("no case"), 404, "arbitration_case_not_found"),
    (e.AuthenticationError("unknown API key"), 401, "unauthenticated"),
    (e.PermissionDeniedError("lacks memory:write"), 403, "permission_denied"),
    (e.PayloadTooLargeError("too big"), 413, "payload_too_large"),
    (e.ContentTooLargeError("too long"), 413, "content_too_large"),
    (e.InvalidTextError("NUL byte", "content"), 422, "invalid_text"),
    (e.ConcurrentWriteError("lost"), 409, "concurrent_write"),
    (e.StoreUnavailableError("down"), 503, "store_unavailable"),
])
def test_an_error_is_answered_by_its_status_code_and_message(
        error: e.PalimpsestError, status: int, code: str) -> None:
    found = answer(error)
    assert (found.status, found.code, found.message) == (status, code, str(error))
    assert found.body() == {"error": {"code": code, "message": str(error),
                                      "retryable": error.retryable}}


def test_retryable_errors_say_so() -> None:
    assert answer(e.ConcurrentWriteError("lost")).retryable
    assert answer(e.StoreUnavailableError("down")).retryable
    assert not answer(e.CardNotFoundError("no card")).retryable
    assert tool_error_text(e.StoreUnavailableError("down")) == "store_unavailable: down (retryable)"
    assert tool_error_text(e.CardNotFoundError("no card 7")) == "card_not_found: no card 7"


def test_errors_that_are_not_ours_say_nothing_of_their_insides() -> None:
    class Body(BaseModel):
        n: int

    with pytest.raises(ValidationError) as invalid:
        Body.model_validate({"n": "x"})
    assert (answer(invalid.value).status, answer(invalid.value).code) == (422, "invalid_request")
    assert "n:" in answer(invalid.value).message
    down = answer(psycopg.OperationalError("connection refused at 10.0.0.5"))
    assert (down.status, down.code, down.retryable) == (503, "store_unavailable", True)
    assert "10.0.0.5" not in down.message
    crash = answer(KeyError("secret internals"))
    assert (crash.status, crash.code) == (500, "internal_error")
    assert "secret" not in crash.message
