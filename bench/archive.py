"""Archive benchmark: the log's past into Parquet, read back, said, and out of the stream.

Starts a real nats-server with a stream made with retention (keep the last 1,000 events),
fills it with bench/rebuild.py's synthetic history, and gives the archiver snapshots that
cover it all (what the scheduler and quota would have saved). Then, in the same run:

1. baseline: a raw ordered-consumer replay of the whole stream with nats-py and no
   processing (a callback that only counts);
2. one archiver pass: every event beyond the limit read from the stream, written to
   Parquet segments of 100k (DuckDB, zstd), each read back and compared, each said on
   the log (``log.archived``), then the stream purged of them;
3. the archive and the stream read as one (``ArchivedLog.read`` from 0), decoded.

Figures: events archived per second and its ratio to the raw replay; the read-back rate;
bytes on disk per event. Prints one JSON line.
Usage: python bench/archive.py [--events 200000]
"""

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from rebuild import fill, raw_ordered_replay  # bench/rebuild.py, beside this file

from projections.archive import Archive, ArchivedLog
from services.actors.archiver import Archiver
from services.adapters import nats_server
from services.adapters.jetstream import connect
from services.adapters.system_clock import SystemClock
from services.domain.fold.cluster import ClusterState
from services.domain.fold.state_codec import encode_actor_state
from services.ports import Retention
from services.testing import MemorySnapshots

KEEP = 1000


async def main(args: argparse.Namespace) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="fgpu-bench-archive-"))
    with nats_server.nats_server() as server:
        events = await connect(server.url, name="bench-archive")
        await events.create_or_update_stream(retention=Retention(max_events=KEEP))
        n = await fill(events, args.events)
        replay_per_s = await raw_ordered_replay(events, n)
        identity = await events.identity()
        covering = MemorySnapshots()
        covering.data = encode_actor_state(ClusterState(last_seq=n, folded=n), identity)
        archive = Archive(root, identity)
        archiver = Archiver(events, events, archive, [covering, covering], SystemClock())
        t0 = time.perf_counter()
        done = await archiver.pass_once()
        archive_s = time.perf_counter() - t0
        assert done is not None and done.written, done
        archived = done.archived_through
        left = (await events.stream_info()).messages
        t0 = time.perf_counter()
        read = 0
        async for batch in ArchivedLog(events, archive).read(0, until=n):
            read += len(batch)
        read_s = time.perf_counter() - t0
        await events.close()
    on_disk = sum(p.stat().st_size for p in archive.dir.iterdir())
    archive_per_s = archived / archive_s
    return {
        "bench": "archive",
        "events": n,
        "archived": archived,
        "segments": len(done.written),
        "left_in_stream": left,
        "raw_replay_per_s": round(replay_per_s),
        "archive_per_s": round(archive_per_s),
        "ratio_archive_to_raw_replay": round(archive_per_s / replay_per_s, 3),
        "read_back_per_s": round(read / read_s),
        "read_back_events": read,
        "bytes_per_event_on_disk": round(on_disk / archived, 1),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=200_000)
    print(json.dumps(asyncio.run(main(parser.parse_args()))))
