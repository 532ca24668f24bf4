"""Follow fgpu's log with a reader keypair (`fgpu admin keypair create --role reader`).

    python reader.py nats://HOST:4222 AK... SECRET [--count N]

Prints one JSON line per event, in the log's order, and acknowledges each once printed:
after a restart the reader's consumer goes on from the first event not acknowledged.
Needs nats-py alone (and fgpu's `events` package only to decode into typed events: plain
JSON works as well).
"""

import argparse
import asyncio
import json

import nats


async def follow(url: str, key: str, secret: str, count: int | None) -> None:
    nc = await nats.connect(url, user=key, password=secret, inbox_prefix=f"_INBOX.{key}")
    done = asyncio.Event()
    seen = 0

    async def on_event(msg: nats.aio.msg.Msg) -> None:
        nonlocal seen
        if done.is_set():
            return  # not acknowledged: handed again at the next start
        event = json.loads(msg.data)
        seq = msg.metadata.sequence.stream  # in the stream the reader reads
        print(json.dumps({"seq": seq, "subject": msg.subject, **event}), flush=True)
        await msg.ack()
        seen += 1
        if count is not None and seen >= count:
            done.set()

    # The consumer is the reader's own, made by fgpu: it delivers here, nowhere else.
    await nc.subscribe(f"fgpu.out.{key}", cb=on_event)
    try:
        await done.wait()
    finally:
        await nc.drain()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("access_key")
    parser.add_argument("secret")
    parser.add_argument("--count", type=int, default=None, help="stop after N events")
    args = parser.parse_args()
    asyncio.run(follow(args.url, args.access_key, args.secret, args.count))
