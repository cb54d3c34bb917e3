"""Errors the domain raises. A command that raises stores nothing.

    PalimpsestError
    ├── InvalidCommandError             the command itself is malformed: nothing is stored
    │   ├── InvalidTextError            a NUL byte, lone surrogate or control character in any text;
    │   │                               a '/' in a subject or label; an empty tag (names the field)
    │   ├── EmptyContentError
    │   ├── ContentTooLargeError
    │   ├── TooManyTagsError
    │   ├── InvalidScopeError
    │   ├── InvalidKindError            unknown kind or memory type, or a type the kind does not take
    │   ├── InvalidTenantError
    │   ├── InvalidTimeError
    │   │   ├── ValidityOrderError      valid_to before valid_from
    │   │   ├── FutureTimeError         beyond the clock-skew tolerance
    │   │   └── OccurredAtImmutableError
    │   ├── CardinalityError            an edge the slot's cardinality does not allow
    │   └── PayloadTooLargeError        a request over the size limits, refused before any work
    ├── InvalidTransitionError          a lifecycle move the state machine forbids
    ├── NotFoundError                   missing, or owned by another tenant: the two look the same
    │   ├── CardNotFoundError
    │   └── ArbitrationCaseNotFoundError
    ├── ConflictError                   the world moved under the command
    │   ├── StaleCardError              the card the command targets is no longer current
    │   ├── ConcurrentWriteError        lost the race too often; retryable
    │   └── IdempotencyKeyReusedError   same request id, different command
    ├── AuthenticationError             no key, or an unknown or revoked one
    ├── PermissionDeniedError           the key lacks the scope, or names another tenant
    ├── StoreUnavailableError           the event store failed; retryable
    └── InvariantViolation              a rule the write side guarantees would break: a bug, not input
"""

from __future__ import annotations


class PalimpsestError(Exception):
    """Base of every error Palimpsest raises on purpose."""

    retryable = False


class InvalidCommandError(PalimpsestError):
    pass


class InvalidTextError(InvalidCommandError):
    """Text no field may hold. ``field`` names the field (``tags[2]`` for an item of a list)."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class EmptyContentError(InvalidCommandError):
    pass


class ContentTooLargeError(InvalidCommandError):
    pass


class TooManyTagsError(InvalidCommandError):
    pass


class InvalidScopeError(InvalidCommandError):
    pass


class InvalidKindError(InvalidCommandError):
    pass


class InvalidTenantError(InvalidCommandError):
    pass


class InvalidTimeError(InvalidCommandError):
    pass


class ValidityOrderError(InvalidTimeError):
    pass


class FutureTimeError(InvalidTimeError):
    pass


class OccurredAtImmutableError(InvalidTimeError):
    pass


class CardinalityError(InvalidCommandError):
    pass


class PayloadTooLargeError(InvalidCommandError):
    pass


class InvalidTransitionError(PalimpsestError):
    pass


class NotFoundError(PalimpsestError):
    pass


class CardNotFoundError(NotFoundError):
    pass


class ArbitrationCaseNotFoundError(NotFoundError):
    pass


class ConflictError(PalimpsestError):
    pass


class StaleCardError(ConflictError):
    pass


class ConcurrentWriteError(ConflictError):
    retryable = True


class IdempotencyKeyReusedError(ConflictError):
    pass


class AuthenticationError(PalimpsestError):
    pass


class PermissionDeniedError(PalimpsestError):
    pass


class StoreUnavailableError(PalimpsestError):
    retryable = True


class InvariantViolation(PalimpsestError):
    pass
