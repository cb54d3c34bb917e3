"""The one place an error becomes an answer: every ``PalimpsestError`` to an HTTP status and a stable
code, for REST (``{"error": {"code", "message", "retryable"}}``) and MCP (a tool error).

Nothing below the edge raises ``HTTPException``: use cases raise domain errors, and this table
says what a caller sees. A missing card and another tenant's card are one ``NotFoundError``, so
they are answered alike. A subclass missing from the table would be answered by its nearest
listed ancestor; the unit tests refuse that, so each error is named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from pydantic import ValidationError

from domain import errors as e
from infra.embedders import EmbeddingError, EmbeddingUnavailableError
from infra.keyring import MasterKeyError, MissingKeyError, UnitErasedError
from infra.llm import LLMError
from infra.locale_check import UnsupportedLocaleError
from projections.bulk import RowsRefusedError
from projections.failures import ParkedEventNotFoundError
from projections.projector import ProjectionError, ProjectionUnavailableError
from services.command.failures import ParkedRequestNotFoundError
from services.ingest.extraction import ExtractionFailed
from services.query.timeexpr import AmbiguousTimeError


@dataclass(frozen=True)
class Answer:
    status: int
    code: str
    message: str
    retryable: bool

    def body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "retryable": self.retryable}}


#: Every error Palimpsest raises on purpose: (HTTP status, stable code).
STATUS: dict[type[e.PalimpsestError], tuple[int, str]] = {
    e.PalimpsestError: (500, "internal_error"),
    e.InvalidCommandError: (422, "invalid_command"),
    e.InvalidTextError: (422, "invalid_text"),
    e.EmptyContentError: (422, "empty_content"),
    e.ContentTooLargeError: (413, "content_too_large"),
    e.TooManyTagsError: (413, "too_many_tags"),
    e.PayloadTooLargeError: (413, "payload_too_large"),
    e.InvalidScopeError: (422, "invalid_scope"),
    e.InvalidKindError: (422, "invalid_kind"),
    e.InvalidTenantError: (422, "invalid_tenant"),
    e.InvalidTimeError: (422, "invalid_time"),
    e.ValidityOrderError: (422, "validity_order"),
    e.FutureTimeError: (422, "future_time"),
    e.OccurredAtImmutableError: (422, "occurred_at_immutable"),
    e.CardinalityError: (422, "cardinality"),
    AmbiguousTimeError: (422, "ambiguous_time"),
    e.InvalidTransitionError: (409, "invalid_transition"),
    e.NotFoundError: (404, "not_found"),
    e.CardNotFoundError: (404, "card_not_found"),
    UnitErasedError: (404, "unit_erased"),
    e.ArbitrationCaseNotFoundError: (404, "arbitration_case_not_found"),
    ParkedEventNotFoundError: (404, "parked_event_not_found"),
    ParkedRequestNotFoundError: (404, "parked_request_not_found"),
    e.ConflictError: (409, "conflict"),
    e.StaleCardError: (409, "stale_card"),
    e.ConcurrentWriteError: (409, "concurrent_write"),
    e.IdempotencyKeyReusedError: (409, "idempotency_key_reused"),
    e.AuthenticationError: (401, "unauthenticated"),
    e.PermissionDeniedError: (403, "permission_denied"),
    e.StoreUnavailableError: (503, "store_unavailable"),
    e.InvariantViolation: (500, "invariant_violation"),
    UnsupportedLocaleError: (500, "unsupported_locale"),
    EmbeddingError: (502, "embedding_failed"),
    EmbeddingUnavailableError: (503, "embedding_unavailable"),
    ProjectionError: (500, "projection_failed"),
    ProjectionUnavailableError: (503, "projection_unavailable"),
    RowsRefusedError: (500, "rows_refused"),
    LLMError: (503, "llm_unavailable"),
    ExtractionFailed: (503, "extraction_failed"),
    MissingKeyError: (500, "key_missing"),
    MasterKeyError: (500, "master_key_refused"),
}


def answer(error: BaseException) -> Answer:
    """What the caller is told about ``error``. Errors that are not ours say nothing of their
    insides: a database that cannot be reached is a retryable 503, anything else a 500."""
    if isinstance(error, e.PalimpsestError):
        status, code = _listed(type(error))
        return Answer(status, code, str(error) or code.replace("_", " "), error.retryable)
    if isinstance(error, ValidationError):
        return Answer(422, "invalid_request", _validation_message(error), False)
    if isinstance(error, psycopg.OperationalError):
        return Answer(503, "store_unavailable", "the database is unavailable; try again", True)
    return Answer(500, "internal_error", "an unexpected error; it has been logged", False)


def _listed(cls: type[e.PalimpsestError]) -> tuple[int, str]:
    for ancestor in cls.__mro__:
        if ancestor in STATUS:
            return STATUS[ancestor]  # type: ignore[index]
    return STATUS[e.PalimpsestError]


def _validation_message(error: ValidationError) -> str:
    problems = []
    for item in error.errors()[:5]:
        where = ".".join(str(part) for part in item["loc"]) or "body"
        problems.append(f"{where}: {item['msg']}")
    more = error.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def tool_error_text(error: BaseException) -> str:
    """An MCP tool error's text: the same code and message REST answers, as one line."""
    found = answer(error)
    return f"{found.code}: {found.message}" + (" (retryable)" if found.retryable else "")
