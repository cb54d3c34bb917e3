"""The console: a person's pages at ``/console``, server-rendered (Jinja2) with htmx.

``mount_console(api, services)`` is the one call ``create_api`` makes: the static assets at
``/console/static``, the sign-in, and every page module's routes on one router. A page calls the
same operation REST calls (``Visitor.run``); see :mod:`services.console.web` for what a page
module shares (``templates``, ``SignedIn``, ``Checked``, ``page``). Decision record 0014.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from services.console import web
from services.console.sign_in import sign_in_routes, signed_out
from services.console.views_arbitration import arbitration_routes
from services.console.views_operations import operations_routes
from services.console.views_proposals import proposals_routes
from services.console.views_read import read_routes

if TYPE_CHECKING:
    from services.bootstrap import Services


def mount_console(api: FastAPI, services: Services) -> None:
    """The console on ``api``: assets, sign-in and pages under ``/console``."""
    key = services.settings.console_session_key
    api.state.console_sessions = web.Sessions(
        services, secret=key.get_secret_value().encode() if key is not None else None)
    api.mount(web.PREFIX + "/static", StaticFiles(directory=web.HERE / "static"),
              name="console-static")
    router = APIRouter(prefix=web.PREFIX, include_in_schema=False)
    sign_in_routes(router)
    arbitration_routes(router)
    proposals_routes(router)
    operations_routes(router)
    read_routes(router)
    api.include_router(router)
    api.add_exception_handler(web.SignInRequired, _sign_in_first)
    api.add_exception_handler(web.CsrfRefused, _csrf_refused)


async def _sign_in_first(request: Request, error: Exception) -> Response:
    """No session: a page goes to the sign-in form (htmx is told to go there itself)."""
    target = web.PREFIX + "/sign-in"
    if request.headers.get("HX-Request"):
        return Response(status_code=204, headers={"HX-Redirect": target})
    return signed_out(RedirectResponse(target, status_code=303))


async def _csrf_refused(request: Request, error: Exception) -> Response:
    return web.page(request, None, "refused.html", status_code=403, problem=str(error))
