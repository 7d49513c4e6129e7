"""The management web UI's static files (``management/ui/``), served by the management
listener next to the API, as RabbitMQ's management plugin serves its UI on port 15672.

``GET /`` (and ``/index.html``) answer the single page; ``/js/...``, ``/css/...`` and
``/img/...`` the modules, style sheet and icon. Nothing here needs authentication: the page
logs in against ``/api/whoami`` and sends ``Authorization: Basic`` with each API request.
A path under ``/api/`` never reaches these routes, so unknown API paths keep their JSON 404.

Source: https://www.rabbitmq.com/docs/management#usage-ui.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
_NO_CACHE = {"Cache-Control": "no-cache"}  # a new broker version's UI is picked up at once


async def index(_request: web.Request) -> web.FileResponse:
    """The single page (``index.html``)."""
    return web.FileResponse(UI_DIR / "index.html", headers=_NO_CACHE)


def add_ui_routes(app: web.Application) -> None:
    """Register ``/``, ``/index.html`` and the static folders on ``app`` (after the API)."""
    app.router.add_get("/", index)
    app.router.add_get("/index.html", index)
    for folder in ("js", "css", "img"):
        if (UI_DIR / folder).is_dir():
            app.router.add_static(f"/{folder}/", UI_DIR / folder)
