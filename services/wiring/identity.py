"""Who a connection speaks as, on a server with authentication on: an access key as user
and its secret as password, its replies in an inbox of its own (``_INBOX.<key>``, the only
one its permissions let it read). Without a secret a connection is anonymous, which only
an open server (the tests', a cluster without tenancy) lets in."""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.domain.access.permissions import inbox

if TYPE_CHECKING:
    from services.adapters.nats_client import ConnectOptions

__all__ = ["Identity"]


@dataclass(frozen=True)
class Identity:
    access_key: str
    secret: str | None = None

    def options(self) -> "ConnectOptions":
        """nats-py's options to connect as this identity (none: anonymously)."""
        if self.secret is None:
            return {}
        return {
            "user": self.access_key,
            "password": self.secret,
            "inbox_prefix": inbox(self.access_key),
        }
