"""The audit console: one page and its script, served by the read API at ``/console``.

Plain HTML, CSS and JavaScript with no build step and nothing fetched from elsewhere
(the machines it runs on may have no Internet): the page calls the read API only.
"""

from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse

__all__ = ["ASSETS", "mount"]

_DIR = Path(__file__).with_name("console")
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "pipelines.js": "text/javascript; charset=utf-8",
    "endpoints.js": "text/javascript; charset=utf-8",
    "read.js": "text/javascript; charset=utf-8",
}


def mount(app: FastAPI) -> None:
    @app.get("/console", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(_DIR / "index.html", media_type=ASSETS["index.html"])

    @app.get("/console/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ASSETS:
            raise HTTPException(404, f"no console file {name!r}")
        return FileResponse(_DIR / name, media_type=ASSETS[name])
