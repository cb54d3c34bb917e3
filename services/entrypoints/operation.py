"""One use case as every edge offers it: the scope it needs, its input and output models, how
it behaves (MCP's tool annotations). REST and MCP run the same :class:`Operation`, so they give
the same answer for the same call."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel

from domain.errors import ContentTooLargeError, PermissionDeniedError, TooManyTagsError
from services.keys import Principal, require

if TYPE_CHECKING:
    from services.bootstrap import Services
    from services.query.readmodels import Freshness

I = TypeVar("I", bound=BaseModel)  # noqa: E741 - the input model
O = TypeVar("O", bound=BaseModel)  # noqa: E741 - the output model


@dataclass(frozen=True)
class Operation(Generic[I, O]):
    name: str
    summary: str
    input: type[I]
    output: type[O]
    scope: str
    handler: Callable[[Services, Principal, I], O]
    read_only: bool = False
    destructive: bool = False
    idempotent: bool = False
    #: The scope a given input needs, when it depends on the input (a tenant-wide erasure needs
    #: ``memory:erase``); ``scope`` otherwise.
    scope_of: Callable[[I], str] | None = None

    def parse(self, services: Services, payload: I | Mapping[str, Any]) -> I:
        """The input, validated and within the size limits: no database work."""
        data = payload if isinstance(payload, self.input) else self.input.model_validate(payload)
        check_limits(services, data)
        return data

    def run(self, services: Services, principal: Principal, payload: I | Mapping[str, Any]) -> O:
        return self.handler(services, principal, self.authorize(services, principal, payload))

    def authorize(self, services: Services, principal: Principal,
                  payload: I | Mapping[str, Any]) -> I:
        """The input, once the key holds the scope it needs and names no other tenant (an edge
        that answers in its own way, a stream, calls this and then its use case)."""
        data = self.parse(services, payload)
        require(principal, self.scope_of(data) if self.scope_of else self.scope)
        named = getattr(data, "tenant_id", None)
        if named is not None and named != principal.tenant_id:
            raise PermissionDeniedError("the tenant comes from the key: this key is not "
                                        f"{named!r}'s")
        return data


def check_limits(services: Services, data: BaseModel) -> None:
    """The size limits of a write's text and tags (``PALIMPSEST_MAX_CONTENT_CHARS``,
    ``_MAX_TAGS``), checked before any work."""
    settings = services.settings
    for name in ("content", "description"):
        text = getattr(data, name, None)
        if isinstance(text, str) and len(text) > settings.max_content_chars:
            raise ContentTooLargeError(f"{name} holds {len(text)} characters; at most "
                                       f"{settings.max_content_chars}")
    tags = getattr(data, "tags", None) or ()
    if len(tags) > settings.max_tags:
        raise TooManyTagsError(f"{len(tags)} tags; at most {settings.max_tags}")


def fresh(services: Services, who: Principal, data: Any) -> Freshness | None:
    """A read's ``min_position`` waited for (bounded): how far behind the read models still are;
    None when the read named no position."""
    if data.min_position is None:
        return None
    return services.queries.read.wait_for(who.tenant_id, data.min_position,
                                          timeout=services.settings.api_max_wait_seconds)
