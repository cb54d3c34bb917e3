"""The Python client of a running Palimpsest (``palimpsest serve``): ``httpx`` and nothing of the
server. ``Client`` and ``AsyncClient`` offer one method per REST operation; errors are typed by
status (:class:`APIError` and its subclasses). ``palimpsest_client.langgraph`` holds a LangGraph
``BaseStore`` over the same server (the ``[langgraph]`` extra)."""

from palimpsest_client.client import (
    DEFAULT_URL,
    APIError,
    AsyncClient,
    AuthenticationError,
    Call,
    Calls,
    Client,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    raise_for,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL", "APIError", "AsyncClient", "AuthenticationError", "Call", "Calls", "Client",
    "ConflictError", "InvalidRequestError", "NotFoundError", "PermissionDeniedError",
    "UnavailableError", "raise_for", "__version__",
]
