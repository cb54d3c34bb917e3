"""What every console page shares: the templates, the session, CSRF and the operations.

The helpers a page module uses (``views_read.py``, ``views_arbitration.py``, …)::

    from services.console.web import SignedIn, page, templates

    def read_routes(router: APIRouter) -> None:
        @router.get("/timeline", response_class=HTMLResponse)
        def timeline(request: Request, who: SignedIn, ref: str = "") -> Response:
            found = who.attempt("history", {"ref": ref})       # (output, None) or (None, message)
            return page(request, who, "timeline.html", found=found)

* ``templates`` — the :class:`Jinja2Templates` of ``services/console/templates`` (autoescaped).
  A page extends ``base.html`` and fills the blocks ``title`` and ``content``; ``base.html`` draws
  the nav (``data-testid`` ``nav-…``), sets ``hx-headers`` with the CSRF token on ``<body>`` and
  loads ``static/vendor/htmx.min.js``. ``{{ static('vendor/echarts.min.js') }}`` is the URL of
  an asset; ``{{ csrf_field() }}`` is the hidden input every ``<form method="post">`` carries.
* ``SignedIn`` — the dependency of a page: the :class:`Visitor` signed in by the session cookie;
  without a live session, a 303 to ``/console/sign-in`` (htmx: 204 and ``HX-Redirect``), and
  nothing runs. A POST route takes
  ``Checked`` instead: the same visitor once the CSRF token (form field ``csrf_token`` or header
  ``X-CSRF-Token``) matches the session's, else 403 and nothing runs.
* ``Visitor`` — ``principal`` (tenant, scopes, key id: from the key only), ``name`` (the key's
  name, else its id: ``decided_by``), ``csrf`` (the token), ``run(name, payload)`` (the operation
  of ``OPERATIONS``, parsed then run as this principal: the same use case as REST) and
  ``attempt(name, payload)`` (the same, answering ``(output, None)`` or ``(None, message)``, the
  message a page shows instead of an error page).
* filters: ``{{ moment|when }}`` (``2026-05-01 14:03:22 UTC``), ``{{ value|shown }}`` (the text, or
  ``(erased)`` for None: a forgotten text).
* ``page(request, who, template, **context)`` — a template rendered with ``who`` and ``nav`` (the
  section the URL is in) in its context.

The session is one cookie, ``palimpsest_console`` (path ``/console``, HttpOnly, SameSite=Strict,
Secure over https): the key's secret and the CSRF token, encrypted and signed (Fernet) with a key
made when the app is built, so a restart signs everyone out. Each request authenticates the
secret again, as REST does: a revoked key is signed out at once. Each session has an id, sealed
with it: signing out records it in the key store (:meth:`services.keys.KeyStore.end_session`,
a table every HTTP worker reads), so the cookie, replayed, is refused until its seal expires.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from cryptography.fernet import Fernet, InvalidToken
from fastapi import Depends, Request
from fastapi.responses import Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup, escape
from pydantic import ValidationError

from domain.errors import AuthenticationError, PalimpsestError
from services.entrypoints.errors import answer
from services.entrypoints.operations import OPERATIONS
from services.keys import Principal

if TYPE_CHECKING:
    from services.bootstrap import Services

HERE = Path(__file__).parent
PREFIX = "/console"
COOKIE = "palimpsest_console"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "X-CSRF-Token"
#: A session lasts this long after signing in (seconds).
SESSION_SECONDS = 12 * 3600

templates = Jinja2Templates(directory=str(HERE / "templates"))


def _static(path: str) -> str:
    return f"{PREFIX}/static/{path}"


def when(moment: datetime | str | None) -> str:
    """A moment as a page shows it: ``2026-05-01 14:03:22 UTC`` (``—`` for none)."""
    if moment is None:
        return "—"
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (" UTC" if moment.tzinfo else "")


def shown(value: Any) -> Markup:
    """A card's text, or ``(erased)`` for a text that was forgotten (None)."""
    if value is None:
        return Markup('<span class="erased">(erased)</span>')
    return Markup(escape(value))


templates.env.globals["static"] = _static
templates.env.globals["prefix"] = PREFIX
templates.env.filters["when"] = when
templates.env.filters["shown"] = shown


class SignInRequired(Exception):
    """No session (or a stale one): a page answers 303 to the sign-in form."""


class CsrfRefused(Exception):
    """A POST without the session's CSRF token: refused (403), nothing runs."""


@dataclass(frozen=True)
class Visitor:
    """The person signed in: their key's principal, its name, the session's CSRF token."""

    principal: Principal
    name: str
    csrf: str
    services: Services
    #: The session's id, and when its seal expires (what a sign-out records).
    session_id: str = ""
    expires_at: datetime | None = None

    def run(self, name: str, payload: Any) -> Any:
        """The operation ``name`` as REST runs it: parsed (no database work), then run as this
        principal (scope and tenant checked). Raises what the use case raises."""
        operation = OPERATIONS[name]
        return operation.run(self.services, self.principal, operation.parse(self.services, payload))

    def attempt(self, name: str, payload: Any) -> tuple[Any, str | None]:
        """``run``, answering ``(output, None)``, or ``(None, message)`` when it is refused."""
        try:
            return self.run(name, payload), None
        except (PalimpsestError, ValidationError) as error:
            return None, message(error)


def message(error: BaseException) -> str:
    """What a page says of an error: the message REST answers, with its stable code."""
    found = answer(error)
    return f"{found.message} ({found.code})"


class Sessions:
    """The console's sessions: a cookie holding the key's secret and a CSRF token, sealed."""

    def __init__(self, services: Services, secret: bytes | None = None) -> None:
        self.services = services
        self._fernet = Fernet(secret or Fernet.generate_key())

    def sign_in(self, secret: str) -> tuple[Principal, str]:
        """The principal of ``secret`` (AuthenticationError if it is not a live key) and the
        cookie's value for a new session."""
        principal = self.services.keys.authenticate(secret)
        sealed = json.dumps({"key": secret, "csrf": secrets.token_urlsafe(32),
                             "session": secrets.token_urlsafe(18)}).encode()
        return principal, self._fernet.encrypt(sealed).decode()

    def visitor(self, request: Request) -> Visitor:
        """The visitor of the request's session; SignInRequired without a live one (none, a
        stale or forged cookie, a revoked key, a session signed out)."""
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            raise SignInRequired()
        keys = self.services.keys
        try:
            opened = json.loads(self._fernet.decrypt(cookie.encode(), ttl=SESSION_SECONDS))
            principal, session = keys.authenticate(opened["key"]), str(opened["session"])
            sealed_at = self._fernet.extract_timestamp(cookie.encode())
        except (InvalidToken, AuthenticationError, ValueError, KeyError, TypeError):
            raise SignInRequired() from None
        if keys.session_ended(session, principal.tenant_id):
            raise SignInRequired()
        expires = datetime.fromtimestamp(sealed_at, UTC) + timedelta(seconds=SESSION_SECONDS)
        return Visitor(principal, self._name(principal), opened["csrf"], self.services,
                       session_id=session, expires_at=expires)

    def sign_out(self, who: Visitor) -> None:
        """End ``who``'s session for good: refused from now on, on every worker, even if its
        cookie is sent again."""
        if who.session_id and who.expires_at is not None:
            self.services.keys.end_session(who.session_id, who.principal.tenant_id, who.expires_at)

    def _name(self, principal: Principal) -> str:
        found = [k.name for k in self.services.keys.list(principal.tenant_id)
                 if k.key_id == principal.key_id]
        return (found[0] if found and found[0] else principal.key_id)[:200]


def sessions(request: Request) -> Sessions:
    found = getattr(request.app.state, "console_sessions", None)
    if found is None:
        raise RuntimeError("the console is not mounted on this app")
    return found  # type: ignore[no-any-return]


def signed_in(request: Request) -> Visitor:
    return sessions(request).visitor(request)


async def checked(request: Request) -> Visitor:
    """The visitor of a POST whose CSRF token matches the session's (else 403, nothing runs)."""
    who = sessions(request).visitor(request)
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")):
        form = await request.form()
        field = form.get(CSRF_FIELD)
        sent = field if isinstance(field, str) else None
    if not sent or not hmac.compare_digest(sent.encode(), who.csrf.encode()):
        raise CsrfRefused("the form's CSRF token is missing or wrong: nothing was changed; reload "
                          "the page and try again")
    return who


SignedIn = Annotated[Visitor, Depends(signed_in)]
Checked = Annotated[Visitor, Depends(checked)]


def page(request: Request, who: Visitor | None, template: str, status_code: int = 200,
         **context: Any) -> Response:
    """``template`` rendered for ``who``, with ``nav`` the section the request is in."""
    section = request.url.path.removeprefix(PREFIX).strip("/").split("/")[0] or "arbitration"
    csrf = who.csrf if who else ""
    values: Mapping[str, Any] = {
        "who": who, "nav": section, "csrf": csrf,
        "csrf_field": lambda: Markup(f'<input type="hidden" name="{CSRF_FIELD}" '
                                     f'value="{escape(csrf)}">'),
        "csrf_headers": json.dumps({CSRF_HEADER: csrf}), **context}
    return templates.TemplateResponse(request, template, dict(values), status_code=status_code)
