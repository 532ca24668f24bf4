"""The client connection under JetStreamLog and NatsBus, and the one place its errors are
translated.

Every call the log and the bus make into nats-py runs inside ``NatsClient.call``, which
turns what nats-py, JetStream and the transport raise into the log port's errors (the bus
turns those into its own, ``nats_bus``)::

    JetStream API error, by its code (JsErr)
      WRONG_LAST_SEQUENCE        -> ConcurrencyConflict
      ATOMIC_PUBLISH_DUPLICATE   -> ConcurrencyConflict (a batch holding a stored id)
      STREAM_NOT_FOUND           -> StreamMissing
      CONSUMER_NOT_FOUND         -> ConsumerMissing   (a LogError the log handles itself)
      CONSUMER_EXISTS            -> ConsumerExists    (likewise: a read takes another name)
      NO_MESSAGE_FOUND           -> MessageMissing    (a LogError: a message get found none)
      any other                  -> LogError, naming the code
    no responders                -> NoResponders      (a LogError: nothing stores the subject)
    no answer in time            -> TimedOut          (a LogError)
    not connected when it starts -> LogError at once  (no wait for a reconnection)
    connection lost during it    -> LogError at once  (the call is cancelled)
    any other nats-py, timeout or socket error -> LogError

The client reconnects for ever once connected, so a caller that catches LogError can try
again when the server is back; a call never waits on a reconnection it cannot see end.
Given several servers (a cluster), it reconnects at once to the one it tried longest ago:
nats-py's own choice waited 2 s whenever the next server of its shuffled list had been
tried within 2 s, even with another one up (a server killed soon after another came back).
"""

import contextlib
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypedDict, Unpack
from urllib.parse import urlsplit, urlunsplit

import anyio
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client, Server
from nats.aio.subscription import Subscription

from events import subjects as subj
from services.ports import ConcurrencyConflict, LogError, StreamMissing

__all__ = [
    "NO_STREAM",
    "ConnectOptions",
    "ConsumerExists",
    "ConsumerMissing",
    "Credentials",
    "JsErr",
    "MessageMissing",
    "NatsClient",
    "NoResponders",
    "Reconnects",
    "TimedOut",
    "connect_or_close",
    "js_error",
    "open_client",
]

log = structlog.get_logger()

NO_STREAM = (
    f"no stream {subj.STREAM} on this server: an administrator creates it with 'fgpu stream create'"
)
_FOREIGN = (nats.errors.Error, TimeoutError, OSError)
_CONNECT_TIMEOUT_S = 5
_RETRY_SERVER_S = 2.0  # a server is tried again this long after the last try, at the soonest


class JsErr(IntEnum):
    """JetStream API error codes this adapter meets, named after nats-server's constants
    (``server/errors.json``)."""

    CLUSTER_NOT_AVAILABLE = 10008  # JSClusterNotAvailErr: no leader (an election)
    CONSUMER_NOT_FOUND = 10014  # JSConsumerNotFoundErr
    NO_MESSAGE_FOUND = 10037  # JSNoMessageFoundErr
    NOT_ENABLED_FOR_ACCOUNT = 10039  # JSNotEnabledForAccountErr
    STREAM_NAME_IN_USE = 10058  # JSStreamNameExistErr: exists with another configuration
    STREAM_NOT_FOUND = 10059  # JSStreamNotFoundErr
    STREAM_SUBJECT_OVERLAP = 10065  # JSStreamSubjectOverlapErr
    WRONG_LAST_SEQUENCE = 10071  # JSStreamWrongLastSequenceErrF
    NOT_ENABLED = 10076  # JSNotEnabledErr
    CONSUMER_EXISTS = 10148  # JSConsumerAlreadyExists: a create that may not update
    ATOMIC_PUBLISH_DISABLED = 10174  # JSAtomicPublishDisabledErr: the stream lacks allow_atomic
    ATOMIC_PUBLISH_MISSING_SEQ = 10175  # JSAtomicPublishMissingSeqErr
    ATOMIC_PUBLISH_INCOMPLETE_BATCH = 10176  # JSAtomicPublishIncompleteBatchErr
    ATOMIC_PUBLISH_UNSUPPORTED_HEADER = 10177  # JSAtomicPublishUnsupportedHeaderBatchErr
    ATOMIC_PUBLISH_INVALID_BATCH_ID = 10179  # JSAtomicPublishInvalidBatchIDErr
    ATOMIC_PUBLISH_TOO_LARGE_BATCH = 10199  # JSAtomicPublishTooLargeBatchErrF
    ATOMIC_PUBLISH_INVALID_BATCH_COMMIT = 10200  # JSAtomicPublishInvalidBatchCommitErr
    ATOMIC_PUBLISH_DUPLICATE = 10201  # JSAtomicPublishContainsDuplicateMessageErr
    ATOMIC_PUBLISH_TOO_MANY_INFLIGHT = 10210  # JSAtomicPublishTooManyInflight


class ConsumerMissing(LogError):
    """The durable consumer asked for does not exist (the log creates it)."""


class ConsumerExists(LogError):
    """A consumer of the name asked for exists, and the create may not change it."""


class MessageMissing(LogError):
    """A message get found no message of the sequence or subject asked for."""


class NoResponders(LogError):
    """Nobody answered a request: no stream stores the subject, or no JetStream (or, on
    the bus, no agent serves the id)."""


class TimedOut(LogError):
    """A request's answer did not come in time."""


def js_error(what: str, code: int | None, description: str | None) -> LogError:
    """The port's error for JetStream's refusal ``code`` of the call ``what``."""
    text = description or "no description"
    if code in (JsErr.WRONG_LAST_SEQUENCE, JsErr.ATOMIC_PUBLISH_DUPLICATE):
        # A batch holding an event the stream has (its id) stores nothing: the log holds
        # what the writer decided, or another's decision with it; re-read, decide again.
        return ConcurrencyConflict(f"{what}: {text}")
    if code == JsErr.STREAM_NOT_FOUND:
        return StreamMissing(NO_STREAM)
    if code == JsErr.CONSUMER_NOT_FOUND:
        return ConsumerMissing(f"{what}: {text}")
    if code == JsErr.CONSUMER_EXISTS:
        return ConsumerExists(f"{what}: {text}")
    if code == JsErr.NO_MESSAGE_FOUND:
        return MessageMissing(f"{what}: {text}")
    if code == JsErr.ATOMIC_PUBLISH_DISABLED:
        return LogError(
            f"{what}: stream {subj.STREAM} takes no atomic batches: an administrator brings "
            "it up to date with 'fgpu stream create'"
        )
    if code == JsErr.ATOMIC_PUBLISH_UNSUPPORTED_HEADER:
        return LogError(
            f"{what}: this nats-server takes no Nats-Msg-Id inside an atomic batch "
            f"({text}); fgpu needs one that does (2.12.0 does not; 2.15, which it ships, does)"
        )
    name = JsErr(code).name if code is not None and code in set(JsErr) else f"error {code}"
    return LogError(f"{what}: JetStream refused ({name}): {text}")


@dataclass(frozen=True)
class Credentials:
    """How the connection proves who it is and protects its bytes: what a second
    connection to the same server (the bulk reader's) must do alike."""

    user: str | None = None
    password: str | None = None
    token: str | None = None
    nkey: bool = False  # an nkey seed signs the server's nonce
    jwt: bool = False  # a creds file: a user JWT, and the nkey that signs
    tls: bool = False  # an SSLContext was given; a tls:// URL says so too
    inbox_prefix: str = "_INBOX"  # where replies to the connection go


class Reconnects:
    """Which server of several a client reconnects to, and when (nats-py's
    ``reconnect_to_server_handler``): the one tried longest ago (one never tried first, in
    the pool's order), at once unless it was tried within ``retry_s``. The server just
    lost counts as tried then, so the others come first."""

    def __init__(self, retry_s: float = _RETRY_SERVER_S) -> None:
        self.retry_s = retry_s
        self._tried: dict[str, float] = {}  # host:port -> when, on the monotonic clock

    def lost(self, netloc: str) -> None:
        self._tried[netloc] = time.monotonic()

    def next(self, servers: list[Server], _info: dict[str, Any]) -> tuple[Server, float]:
        """The server to try next, and how long to wait before."""
        now = time.monotonic()
        chosen = min(servers, key=lambda s: self._tried.get(s.uri.netloc, float("-inf")))
        last = self._tried.get(chosen.uri.netloc)
        wait = 0.0 if last is None else max(0.0, last + self.retry_s - now)
        self._tried[chosen.uri.netloc] = now + wait
        return chosen, wait


class NatsClient:
    """A nats-py client and what this adapter knows of its connection.

    ``epoch`` counts the connections lost: a long read that started in one epoch fails
    in the next, even if the client has reconnected since (it may have missed messages).
    """

    def __init__(self, credentials: Credentials) -> None:
        self.nc = Client()
        self.credentials = credentials
        self.epoch = 0
        self._in_flight: set[anyio.CancelScope] = set()
        self._closing = False
        self.last_error: str | None = None  # what the server said last (a refusal, say)
        # The server's refusal of who the client is: kept through the transport errors
        # that follow it (the server closes the connection after saying it).
        self.refused: str | None = None
        self.reconnects = Reconnects()
        self._server: str | None = None  # the one connected to, or last connected to (host:port)

    def authenticates(self) -> bool:
        """Whether the server asked this connection who it is (it has tenancy then)."""
        return bool(self.nc._server_info.get("auth_required"))

    @contextlib.contextmanager
    def call(
        self, what: str, *, since: int | None = None, connected: bool = True
    ) -> Iterator[None]:
        """Run the block as the call ``what``; raise only LogError (see the module).

        ``since``: the epoch the caller's read began in; a later one fails the call.
        ``connected=False`` lets the block run while the client is away (a local
        release such as an unsubscribe, which nats-py buffers or drops).
        """
        if connected and not self.nc.is_connected:
            state = "closed" if self.nc.is_closed else "not connected (reconnecting)"
            raise LogError(f"{what}: the connection to NATS is {state}")
        if since is not None and since != self.epoch:
            raise LogError(f"{what}: the connection to NATS was lost during the read")
        scope = anyio.CancelScope()
        self._in_flight.add(scope)
        try:
            with scope:
                yield
        except LogError:
            raise
        except nats.js.errors.APIError as e:
            raise js_error(what, e.err_code, e.description) from e
        except (nats.errors.NoRespondersError, nats.js.errors.NoStreamResponseError) as e:
            raise NoResponders(f"{what}: nobody answered") from e
        except TimeoutError as e:  # nats-py's is one too
            raise TimedOut(f"{what}: {type(e).__name__}: {e}") from e
        except _FOREIGN as e:
            raise LogError(f"{what}: {type(e).__name__}: {e}") from e
        finally:
            self._in_flight.discard(scope)
        if scope.cancelled_caught:
            raise LogError(f"{what}: the connection to NATS was lost")

    async def unsubscribe(self, sub: Subscription) -> None:
        """Drop ``sub``, best effort: never raises (a closed client has dropped it)."""
        with contextlib.suppress(LogError), self.call("unsubscribe", connected=False):
            await sub.unsubscribe()

    async def close(self) -> None:
        """Drain and close; never raises. Calls still in flight fail with LogError."""
        self._closing = True
        # Not calls: closing ends in on_disconnected, which fails the calls in flight.
        if self.nc.is_connected:
            with contextlib.suppress(*_FOREIGN):
                await self.nc.drain()
        if not self.nc.is_closed:
            with contextlib.suppress(*_FOREIGN):
                await self.nc.close()

    # nats-py's callbacks (given at connect).

    def on_connected(self) -> None:
        url = self.nc.connected_url
        self._server = url.netloc if url is not None else None

    async def on_disconnected(self) -> None:
        if self._server is not None:
            self.reconnects.lost(self._server)
        self.epoch += 1
        for scope in list(self._in_flight):
            scope.cancel()
        if not self._closing:
            log.warning("nats.disconnected", calls_failed=len(self._in_flight))

    async def on_reconnected(self) -> None:
        self.on_connected()
        log.info("nats.reconnected", url=_redacted(str(self.nc.connected_url)))

    async def on_error(self, e: Exception) -> None:
        self.last_error = str(e)
        if "authorization violation" in self.last_error.lower():
            self.refused = self.last_error
        log.debug("nats.error", error=f"{type(e).__name__}: {e}")


class ConnectOptions(TypedDict, total=False):
    """nats-py's options for who the client is and how its bytes travel."""

    user: str
    password: str
    token: str
    nkeys_seed: str  # a file
    user_credentials: str  # a creds file
    tls: ssl.SSLContext
    inbox_prefix: str  # where replies to it go: the only inbox a confined identity reads


async def open_client(url: str, *, name: str, **options: Unpack[ConnectOptions]) -> NatsClient:
    """A client connected to ``url`` with ``options`` (user and password, or a token, may
    be in the URL instead).

    Raises LogError if the server cannot be reached or refuses (after a second try).
    """
    credentials = Credentials(
        user=options.get("user"),
        password=options.get("password"),
        token=options.get("token"),
        nkey="nkeys_seed" in options,
        jwt="user_credentials" in options,
        tls="tls" in options or urlsplit(url).scheme == "tls",
        inbox_prefix=options.get("inbox_prefix", "_INBOX"),
    )
    client = NatsClient(credentials)
    # Several servers of a cluster, comma-separated: any of them lets the client in, and
    # it moves to another when one goes (it learns of the others from the first, too).
    servers: str | list[str] = [u.strip() for u in url.split(",")] if "," in url else url
    try:
        await connect_or_close(
            client.nc,
            servers,
            name=name,
            connect_timeout=_CONNECT_TIMEOUT_S,
            # nats-py's first connection honours this too: with "for ever" it never gives
            # up on an unreachable server. Two tries here; for ever once connected, below.
            max_reconnect_attempts=1,
            reconnect_to_server_handler=client.reconnects.next,
            error_cb=client.on_error,
            disconnected_cb=client.on_disconnected,
            reconnected_cb=client.on_reconnected,
            **options,
        )
    except (*_FOREIGN, ImportError) as e:  # ImportError: nkeys, for a seed or a creds file
        if client.refused is not None:
            who = f"access key {options['user']}" if "user" in options else "an anonymous client"
            raise LogError(
                f"NATS at {_redacted(url)} refused {who}: wrong or revoked keypair? "
                "(fgpu login, or FGPU_ACCESS_KEY and FGPU_SECRET_KEY)"
            ) from e
        raise LogError(f"cannot connect to NATS at {_redacted(url)}: {e}") from e
    client.nc.options["max_reconnect_attempts"] = -1
    client.on_connected()
    return client


async def connect_or_close(nc: Client, servers: str | list[str], **options: Any) -> None:
    """``nc.connect(servers, **options)``, with ``nc`` closed if the connect does not
    finish, however it ends: nats-py closes its socket on the errors it handles, not on
    a cancellation (a task group cancelled while a service connects), which left the
    socket open to be found by the garbage collector after its event loop had closed
    ("unclosed transport", in whichever later test the collector ran)."""
    try:
        await nc.connect(servers, **options)
    except BaseException:
        with anyio.CancelScope(shield=True), contextlib.suppress(*_FOREIGN):
            await nc.close()
        raise


def _redacted(url: str) -> str:
    """``url`` without its user, password or token."""
    parts = urlsplit(url)
    if parts.hostname is None or "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=host))
