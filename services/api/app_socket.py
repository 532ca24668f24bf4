"""A browser's WebSocket relayed to an app's WebSocket in a container, over a byte
stream (an app channel): the proxy is the app's client (wsproto), and hands messages on
both ways. The handshake to the app carries the request's headers as ``app_relay``
cleans them (no credential of fgpu's); the browser's socket is accepted only once the app
accepted, with the subprotocol the app chose.
"""

import contextlib

import anyio
from starlette.websockets import WebSocket, WebSocketDisconnect
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from services.api.app_relay import Headers, Pipe

__all__ = ["relay_socket"]

_GONE = (RuntimeError, OSError, WebSocketDisconnect, LocalProtocolError)


async def relay_socket(
    websocket: WebSocket, pipe: Pipe, host: str, target: str, headers: Headers
) -> str:
    """Open ``target`` on the app as a WebSocket through ``pipe`` (``headers`` sent with
    the handshake), accept ``websocket`` once the app has, and relay messages until one
    side closes; how it ended. The browser's socket is closed (or refused) by then."""
    ws = WSConnection(ConnectionType.CLIENT)
    protocols = [
        p.strip()
        for p in websocket.headers.get("sec-websocket-protocol", "").split(",")
        if p.strip()
    ]
    extra = [(n, v) for n, v in headers if n != b"host"]  # wsproto sends ``host``
    request = Request(host=host, target=target, subprotocols=protocols, extra_headers=extra)
    await pipe.put(ws.send(request))
    accepted = await _handshake(ws, pipe)
    if not isinstance(accepted, AcceptConnection):
        await websocket.close(code=1008, reason="the app refused the WebSocket")
        return "the app refused the WebSocket"
    await websocket.accept(subprotocol=accepted.subprotocol)
    why = "closed"
    async with anyio.create_task_group() as tg:

        async def browser_to_app() -> None:
            nonlocal why
            why = await _up(websocket, ws, pipe)
            tg.cancel_scope.cancel()

        tg.start_soon(browser_to_app)
        why = await _down(websocket, ws, pipe)
        tg.cancel_scope.cancel()
    with contextlib.suppress(*_GONE):
        await websocket.close()
    return why


async def _handshake(ws: WSConnection, pipe: Pipe) -> Event | None:
    """The app's answer to the handshake; None if the channel closed first."""
    while True:
        for event in ws.events():
            if isinstance(event, AcceptConnection | RejectConnection):
                return event
        data = await pipe.get()
        if not data:
            return None
        try:
            ws.receive_data(data)
        except RemoteProtocolError:
            return None


async def _up(websocket: WebSocket, ws: WSConnection, pipe: Pipe) -> str:
    """The browser's messages to the app."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                await pipe.put(ws.send(CloseConnection(code=1000)))
                return "the browser closed it"
            if message.get("bytes") is not None:
                await pipe.put(ws.send(BytesMessage(data=message["bytes"])))
            elif message.get("text") is not None:
                await pipe.put(ws.send(TextMessage(data=message["text"])))
    except _GONE:
        return "the browser went"


async def _down(websocket: WebSocket, ws: WSConnection, pipe: Pipe) -> str:
    """The app's messages to the browser."""
    text: list[str] = []
    data: list[bytes] = []
    try:
        while True:
            chunk = await pipe.get()
            if not chunk:
                return "the app's connection closed"
            ws.receive_data(chunk)
            for event in ws.events():
                if isinstance(event, TextMessage):
                    text.append(event.data)
                    if event.message_finished:
                        await websocket.send_text("".join(text))
                        text.clear()
                elif isinstance(event, BytesMessage):
                    data.append(bytes(event.data))
                    if event.message_finished:
                        await websocket.send_bytes(b"".join(data))
                        data.clear()
                elif isinstance(event, Ping):
                    await pipe.put(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    with contextlib.suppress(LocalProtocolError):
                        await pipe.put(ws.send(event.response()))
                    return f"the app closed it ({event.code})"
    except RemoteProtocolError as e:
        return f"the app broke the protocol: {e}"
    except _GONE:
        return "the browser went"
