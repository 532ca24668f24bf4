"""Who is asking the read API: a short-lived token obtained with a keypair.

``POST /v1/auth/token`` with an access key and its secret answers a bearer token, signed
by this API (HMAC-SHA256 with a key of its own), naming the access key and when it
expires. Every other request carries it (``Authorization: Bearer``; the event stream may
take it as ``?access_token=`` too, since a browser's EventSource sends no headers). The
keypair is looked up again at every request, so a revoked key or a removed user reads
nothing more from the next request on, whatever its token says.

The log keeps only a salted scrypt hash of each secret, so a secret is checked once (by
design, slowly) and then remembered, as its SHA-256, for as long as its keypair lives;
wrong ones are throttled per key (``SecretChecks``).

A cluster with no tenancy needs no token (``visibility.OPEN``): its log is open to anyone
on the bus anyway. Once a domain exists, a request without a valid token is refused (401).
"""

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import anyio

from services.domain.access.keys import secret_matches
from services.domain.access.throttle import SecretChecks
from services.domain.access.visibility import OPEN, Viewer, viewer_of
from services.domain.tenancy.model import Tenancy

__all__ = ["MAX_TOKEN", "Authenticator", "Refused", "TokenSigner"]

_PREFIX = "fgpu1"
TOKEN_TTL_S = 3600
MAX_TOKEN = 512  # far more than a token of this API takes (an access key is 64 at most)
_EXPIRY_DIGITS = 12  # unix seconds: enough until the year 30000


class Refused(Exception):
    """The request may not be answered: ``status`` 401 (who?) or 403 (not you)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class TokenSigner:
    """Issues and checks tokens ``fgpu1.<access key>.<expires, unix s>.<signature>``."""

    key: bytes
    ttl_s: int = TOKEN_TTL_S

    @classmethod
    def fresh(cls, ttl_s: int = TOKEN_TTL_S) -> "TokenSigner":
        """A signer with a new random key: its tokens are good with this API only."""
        return cls(secrets.token_bytes(32), ttl_s)

    def _sign(self, body: str) -> str:
        mac = hmac.new(self.key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def issue(self, access_key: str, now: float) -> tuple[str, int]:
        """A token for ``access_key``, and when it expires (unix seconds)."""
        expires = int(now) + self.ttl_s
        body = f"{_PREFIX}.{access_key}.{expires}"
        return f"{body}.{self._sign(body)}", expires

    def access_key(self, token: str, now: float) -> str:
        """The access key a genuine, unexpired ``token`` names. Raises Refused (401), for
        anything else whatever its length or characters."""
        parts = token.split(".")
        # A token of this API is short and ASCII: an expiry of ASCII digits ("²" is a
        # digit to str.isdigit, not to int) and a signature hmac may compare.
        if (
            len(token) > MAX_TOKEN
            or not token.isascii()
            or len(parts) != 4
            or parts[0] != _PREFIX
            or not parts[2].isdigit()
            or len(parts[2]) > _EXPIRY_DIGITS
        ):
            raise Refused(401, "not a token of this API")
        body = ".".join(parts[:3])
        if not hmac.compare_digest(parts[3], self._sign(body)):
            raise Refused(401, "not a token of this API (or the API was restarted)")
        if int(parts[2]) <= now:
            raise Refused(401, "the token has expired: obtain another")
        return parts[1]


class Authenticator:
    """Tokens for keypairs, and the viewer behind a token, as the tenancy stands now."""

    def __init__(
        self,
        tenancy: Callable[[], Tenancy],
        signer: TokenSigner,
        now: Callable[[], float],
    ) -> None:
        self._tenancy = tenancy
        self.signer = signer
        self._now = now
        self._secrets = SecretChecks()

    @property
    def open(self) -> bool:
        """Whether the cluster has no tenancy yet: no token needed, everything visible."""
        return not self._tenancy().on

    async def login(self, access_key: str, secret: str) -> tuple[Viewer, str, int]:
        """The viewer a keypair is, a token for it and its expiry. Raises Refused."""
        t = self._tenancy()
        found = viewer_of(t, access_key)
        if isinstance(found, str):
            raise Refused(401, found)
        kp = t.keypairs[access_key]
        refused = await self._secret_refusal(access_key, secret, kp.secret_hash)
        if refused is not None:
            raise Refused(401, refused)
        token, expires = self.signer.issue(access_key, self._now())
        return found, token, expires

    def viewer(self, token: str | None) -> Viewer:
        """Who a request with ``token`` (None: none) reads as. Raises Refused."""
        if self.open:
            return OPEN
        if not token:
            raise Refused(401, "sign in: POST /v1/auth/token, then send its bearer token")
        return self.holder(self.signer.access_key(token, self._now()))

    def holder(self, access_key: str) -> Viewer:
        """The viewer ``access_key`` is now. Raises Refused (401: revoked, removed)."""
        found = viewer_of(self._tenancy(), access_key)
        if isinstance(found, str):
            self._secrets.forget(access_key)
            raise Refused(401, found)
        return found

    def live(self, viewer: Viewer) -> bool:
        """Whether ``viewer`` may still read (its keypair not revoked, its user not
        removed): a stream opened before checks it as it goes."""
        return viewer.user is None or not isinstance(
            viewer_of(self._tenancy(), viewer.access_key), str
        )

    async def _secret_refusal(self, access_key: str, secret: str, kept: str) -> str | None:
        """Why ``secret`` is refused for ``access_key`` (None: it is right): the scrypt
        check runs once per right secret, and not at all for a throttled key."""
        return await self._secrets.refusal(
            access_key,
            secret,
            self._now(),
            partial(anyio.to_thread.run_sync, secret_matches, secret, kept),
        )
