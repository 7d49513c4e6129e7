"""The management web UI's static files (``management/ui/``), served by the management
listener next to the API, as RabbitMQ's management plugin serves its UI on port 15672.

``GET /`` (and ``/index.html``) answer the single page; ``/js/...``, ``/css/...`` and
``/img/...`` the modules, style sheet and icon (content type from the file name). Nothing
here needs authentication: the page logs in against ``/api/whoami`` and sends
``Authorization: Basic`` with each API request. A missing file, or a path leaving the UI
folder, is the API's JSON 404; paths under ``/api/`` never reach these routes.

Source: https://www.rabbitmq.com/docs/management#usage-ui.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from management.errors import not_found

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
# revalidate every time (ETag/Last-Modified): a new broker version's UI is picked up at once
_NO_CACHE = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
# the page runs its own modules only and talks to its own origin (RabbitMQ sends a CSP too)
_PAGE_HEADERS = {**_NO_CACHE, "X-Frame-Options": "DENY", "Content-Security-Policy":
                 "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                 "base-uri 'self'; frame-ancestors 'none'"}


async def index(_request: web.Request) -> web.FileResponse:
    """The single page (``index.html``)."""
    return web.FileResponse(UI_DIR / "index.html", headers=_PAGE_HEADERS)


async def static_file(request: web.Request) -> web.FileResponse:
    """A file under ``ui/{folder}/``; 404 ``Object Not Found`` when there is none."""
    folder = (UI_DIR / request.match_info["folder"]).resolve()
    target = (folder / request.match_info["path"]).resolve()
    if not target.is_relative_to(folder) or not target.is_file():
        raise not_found()
    return web.FileResponse(target, headers=_NO_CACHE)


def add_ui_routes(app: web.Application) -> None:
    """Register ``/``, ``/index.html`` and the static folders on ``app`` (after the API)."""
    app.router.add_get("/", index)
    app.router.add_get("/index.html", index)
    app.router.add_get(r"/{folder:js|css|img}/{path:.+}", static_file)
