"""Why the registrar refuses an administrator's request: a code and a reason."""

from dataclasses import dataclass
from typing import Literal

__all__ = ["Refusal"]


@dataclass(frozen=True, slots=True)
class Refusal:
    code: Literal["forbidden", "invalid", "conflict"]
    reason: str
