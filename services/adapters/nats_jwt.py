"""NATS keys and JWTs, as the auth callout needs them: read the server's authorization
request, sign a user's permissions and the answer.

The formats are nats-io/jwt v2's (``docs/design/nats-tenancy-findings.md``): a header
``{"typ":"JWT","alg":"ed25519-nkey"}``, the claims, each part base64url without padding,
signed with the issuer's account nkey; ``jti`` is base32 (no padding) of SHA-512/256
over the standard claims. The ``nkeys`` package signs and checks; it cannot make a key,
so ``new_account_seed`` encodes 32 random bytes as nkeys does.
"""

import base64
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

__all__ = [
    "AuthRequest",
    "JwtError",
    "authorization_response",
    "decode_request",
    "new_account_seed",
    "public_key",
    "user_jwt",
]

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
# The standard claims in the order nats-io/jwt hashes them for ``jti``.
_STANDARD = ("aud", "exp", "jti", "iat", "iss", "name", "nbf", "sub")


class JwtError(ValueError):
    """A token that is not a JWT of the server, or not signed by it."""


def new_account_seed() -> str:
    """A fresh account nkey seed (``SA...``): its public key issues users' JWTs."""
    seed: bytes = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)
    return seed.decode()


def public_key(seed: str) -> str:
    return str(nkeys.from_seed(seed.encode()).public_key.decode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def _jti(claims: dict[str, Any]) -> str:
    standard = {k: claims[k] for k in _STANDARD if k != "jti" and claims.get(k) not in (None, "")}
    digest = hashlib.new("sha512_256", _json(standard)).digest()
    return base64.b32encode(digest).decode().rstrip("=")


def _encode(claims: dict[str, Any], seed: str) -> str:
    keys = nkeys.from_seed(seed.encode())
    c = {**claims, "iss": keys.public_key.decode(), "iat": int(time.time())}
    c["jti"] = _jti(c)
    c["nats"] = {**c.get("nats", {}), "version": 2}
    signed = f"{_b64(_json(_HEADER))}.{_b64(_json(c))}"
    return f"{signed}.{_b64(keys.sign(signed.encode()))}"


@dataclass(frozen=True)
class AuthRequest:
    """What a client presented at connect, as the server tells the callout."""

    server_id: str
    user_nkey: str  # the key the server made for this connection: the JWTs' subject
    user: str  # what the client gave as user (an access key), or ""
    password: str
    client_id: int  # the connection's id on that server (to kick it later)
    name: str  # the client's own name for itself


def decode_request(token: bytes, server_key: str | None = None) -> AuthRequest:
    """The authorization request a server sent; its signature checked against the server's
    own key (``server_key``, else the one the request names). Raises JwtError."""
    try:
        head, body, signature = token.decode().split(".")
        claims = json.loads(_unb64(body))
        issuer = server_key or claims["iss"]
        raw = _raw_public(issuer)
        nacl.signing.VerifyKey(raw).verify(f"{head}.{body}".encode(), _unb64(signature))
        nats = claims["nats"]
        opts = nats.get("connect_opts") or {}
        info = nats.get("client_info") or {}
        return AuthRequest(
            server_id=str(nats["server_id"]["id"]),
            user_nkey=str(nats["user_nkey"]),
            user=str(opts.get("user") or ""),
            password=str(opts.get("pass") or ""),
            client_id=int(info.get("id") or 0),
            name=str(opts.get("name") or ""),
        )
    except (ValueError, KeyError, TypeError, nacl.exceptions.BadSignatureError) as e:
        raise JwtError(f"not an authorization request of this server: {e!r}") from e


def _raw_public(key: str) -> bytes:
    raw = base64.b32decode(key + "=" * (-len(key) % 8))
    body, crc = raw[:-2], raw[-2:]
    if nkeys.crc16(bytearray(body)).to_bytes(2, "little") != crc:
        raise ValueError("a public key with a bad checksum")
    return bytes(body[1:])


def user_jwt(
    request: AuthRequest,
    *,
    account: str,
    name: str,
    publish: tuple[str, ...],
    subscribe: tuple[str, ...],
    deny_publish: tuple[str, ...],
    responds: bool,
    expires: int | None,
    issuer_seed: str,
) -> str:
    """The user JWT giving ``request``'s connection exactly these permissions in
    ``account`` until ``expires`` (Unix seconds; None: until it is disconnected). Lists
    are never left empty: a user JWT without them is allowed everything."""
    permissions: dict[str, Any] = {
        "pub": {"allow": list(publish) or ["_NOTHING"], "deny": list(deny_publish)},
        "sub": {"allow": list(subscribe) or ["_NOTHING"]},
    }
    if responds:
        permissions["resp"] = {"max": 1, "ttl": 60 * 1_000_000_000}
    claims: dict[str, Any] = {
        "sub": request.user_nkey,
        "aud": account,
        "name": name,
        "nats": {**permissions, "subs": -1, "data": -1, "payload": -1, "type": "user"},
    }
    if expires is not None:
        claims["exp"] = expires
    return _encode(claims, issuer_seed)


def authorization_response(
    request: AuthRequest, issuer_seed: str, *, jwt: str | None = None, error: str | None = None
) -> bytes:
    """The callout's answer to ``request``: a user JWT, or an error (refused)."""
    nats: dict[str, Any] = {"type": "authorization_response"}
    if jwt is not None:
        nats["jwt"] = jwt
    if error is not None:
        nats["error"] = error
    claims = {"sub": request.user_nkey, "aud": request.server_id, "nats": nats}
    return _encode(claims, issuer_seed).encode()
