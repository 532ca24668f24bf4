"""An OutputStore in memory, for agent tests; ``fail`` makes ``keep`` raise OSError."""

from services.ports.output import KeptOutput

__all__ = ["MemoryOutput"]


class MemoryOutput:
    def __init__(self) -> None:
        self.outputs: dict[str, KeptOutput] = {}
        self.fail = False

    async def keep(self, session_id: str, output: KeptOutput) -> None:
        if self.fail:
            raise OSError("the store is full")
        self.outputs[session_id] = output

    async def kept(self, session_id: str) -> KeptOutput | None:
        return self.outputs.get(session_id)
