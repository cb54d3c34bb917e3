"""Signing in with an API key, and out: the session cookie (:class:`services.console.web.Sessions`).
Signing out ends the session on the server (its id is recorded as ended), not only in the browser.

The sign-in form is protected from cross-site posting too (a person signed in as someone else's
key is a quiet attack): the form carries a token that a short-lived cookie repeats.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse, Response

from domain.errors import AuthenticationError
from services.console import web

PRE_COOKIE = "palimpsest_console_form"


def sign_in_routes(router: APIRouter) -> None:
    @router.get("", response_model=None)
    @router.get("/", response_model=None)
    def landing() -> Response:
        return RedirectResponse(web.PREFIX + "/arbitration", status_code=303)

    @router.get("/sign-in", response_model=None)
    def sign_in_form(request: Request) -> Response:
        return _form(request)

    @router.post("/sign-in", response_model=None)
    def sign_in(request: Request, key: Annotated[str, Form(max_length=200)] = "",
                csrf_token: Annotated[str, Form(max_length=200)] = "") -> Response:
        expected = request.cookies.get(PRE_COOKIE, "")
        if not expected or not hmac.compare_digest(csrf_token.encode(), expected.encode()):
            raise web.CsrfRefused("the sign-in form expired or was posted from elsewhere: "
                                  "nothing was changed; reload it and try again")
        try:
            _, cookie = web.sessions(request).sign_in(key.strip())
        except AuthenticationError:
            return _form(request, "That key is not a live API key of this server: not signed in.",
                         status_code=401)
        response = RedirectResponse(web.PREFIX + "/arbitration", status_code=303)
        response.set_cookie(web.COOKIE, cookie, max_age=web.SESSION_SECONDS, path=web.PREFIX,
                            httponly=True, samesite="strict", secure=_https(request))
        response.delete_cookie(PRE_COOKIE, path=web.PREFIX + "/sign-in")
        return response

    @router.post("/sign-out", response_model=None)
    def sign_out(request: Request, who: web.Checked) -> Response:
        web.sessions(request).sign_out(who)
        return signed_out(RedirectResponse(web.PREFIX + "/sign-in", status_code=303))


def signed_out(response: Response) -> Response:
    """``response``, clearing the session cookie."""
    response.delete_cookie(web.COOKIE, path=web.PREFIX)
    return response


def _form(request: Request, problem: str | None = None, status_code: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    response = web.templates.TemplateResponse(
        request, "sign_in.html", {"who": None, "nav": "sign-in", "csrf": token, "problem": problem},
        status_code=status_code)
    response.set_cookie(PRE_COOKIE, token, max_age=3600, path=web.PREFIX + "/sign-in",
                        httponly=True, samesite="strict", secure=_https(request))
    return response


def _https(request: Request) -> bool:
    return request.url.scheme == "https"
