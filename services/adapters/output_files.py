"""An OutputStore in a directory: one JSON file per ended session, written whole (a
temporary file renamed into place), so a reader finds the old file, the new one or none."""

import json
import os
import tempfile
from pathlib import Path

import anyio

from services.ports.output import KeptOutput

__all__ = ["OutputFiles"]


class OutputFiles:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def _path(self, session_id: str) -> Path:
        if not session_id or "/" in session_id or session_id.startswith("."):
            raise OSError(f"not a session id: {session_id!r}")
        return self.root / f"{session_id}.json"

    async def keep(self, session_id: str, output: KeptOutput) -> None:
        await anyio.to_thread.run_sync(self._keep, session_id, output)

    def _keep(self, session_id: str, output: KeptOutput) -> None:
        path = self._path(session_id)
        self.root.mkdir(parents=True, exist_ok=True)
        data = {"owner": output.owner, "domain": output.domain, "text": output.text}
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".kept-")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    async def kept(self, session_id: str) -> KeptOutput | None:
        return await anyio.to_thread.run_sync(self._kept, session_id)

    def _kept(self, session_id: str) -> KeptOutput | None:
        try:
            data = json.loads(self._path(session_id).read_text())
            return KeptOutput(str(data["owner"]), str(data["domain"]), str(data["text"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
