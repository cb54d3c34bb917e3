"""The parameters REST routes share: the bearer key, the idempotency header, ids and moments."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import Depends, Header, Path, Query
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AwareDatetime

_bearer = HTTPBearer(auto_error=False, description="An API key: `palimpsest keys create`.")
Key = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", min_length=1, max_length=200,
    description="Stores the command once: a retry answers the same (the body's request_id).")]
CardId = Annotated[UUID, Path(description="A card id.")]
MinPosition = Annotated[int | None, Query(ge=0, description="A write's position: wait for it.")]
ValidAt = Annotated[AwareDatetime | None, Query(description="As of this world time.")]
KnownAt = Annotated[AwareDatetime | None, Query(description="As known at this time.")]
