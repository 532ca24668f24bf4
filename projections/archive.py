"""The log's archive: what left the stream, in Parquet files, read with the stream as one.

- A segment is one Parquet file of consecutive records (``seq``, ``subject``, ``payload``:
  the stored bytes, as they were), named ``seg-<first>-<last>.parquet`` in a directory of
  the log's own (its identity), so that two logs never mix. Segments start at 1 and follow
  each other without a gap: the archive holds every record up to its ``last_seq``.
- ``write`` puts a segment in place only once it has been read back and found equal to
  what was given, record by record: written under a temporary name, synced, compared,
  renamed, the directory synced. A crash leaves the old archive or the new one.
- ``ArchivedLog`` is an EventLog whose reads cover the archive and then the stream, so a
  reader that starts at 0 (a projections rebuild, an actor with no snapshot) reads the
  whole history; everything else goes to the stream.
"""

import hashlib
import os
import re
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

import anyio
import duckdb
import pyarrow as pa

from events import AnyEvent, Malformed, Record, encode, records_of
from events import subjects as subj
from services.ports import ArchivedSegment, EventLog, LogError

__all__ = ["Archive", "ArchiveError", "ArchivedLog", "Segment"]

_SEGMENT = re.compile(r"seg-(\d{12})-(\d{12})\.parquet")
_READ_BATCH = 10_000


class ArchiveError(LogError):
    """The archive cannot be written or read as it must be (a gap, a segment that does not
    read back as written, a file that is not a segment)."""


@dataclass(frozen=True)
class Segment:
    path: Path
    first_seq: int
    last_seq: int
    sha256: str = ""  # of the payloads end to end, once written (empty when listed)

    @property
    def records(self) -> int:
        return self.last_seq - self.first_seq + 1


def _dir_name(identity: str) -> str:
    """A directory name for a log identity (``FGPU@<created>``): only safe characters."""
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", identity)


def _digest(payloads: Sequence[bytes]) -> str:
    h = hashlib.sha256()
    for p in payloads:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


class Archive:
    """The archive of the log ``identity`` under ``root``."""

    def __init__(self, root: str | Path, identity: str) -> None:
        self.dir = Path(root) / _dir_name(identity)
        self.identity = identity

    def listed(self) -> list[Segment]:
        """The segments in order; raises ArchiveError if they do not follow one another
        from the first record on."""
        if not self.dir.is_dir():
            return []
        found = []
        for p in self.dir.iterdir():
            m = _SEGMENT.fullmatch(p.name)
            if m is not None:
                found.append(Segment(p, int(m[1]), int(m[2])))
        found.sort(key=lambda s: s.first_seq)
        expected = 1
        for s in found:
            if s.first_seq != expected or s.last_seq < s.first_seq:
                raise ArchiveError(
                    f"the archive {self.dir} has a gap or an overlap at {s.path.name} "
                    f"(expected a segment from {expected})"
                )
            expected = s.last_seq + 1
        return found

    def archived_through(self) -> int:
        """The last record archived (0: none)."""
        segments = self.listed()
        return segments[-1].last_seq if segments else 0

    # ---- ArchiveStore ----------------------------------------------------------------------

    async def last_seq(self) -> int:
        return await anyio.to_thread.run_sync(self.archived_through)

    async def write(self, records: Sequence[Record]) -> ArchivedSegment:
        """The records' payloads are the stored ones as the log hands them out: each
        event's canonical encoding (what decodes to it), a malformed record's bytes as its
        record keeps them."""
        seqs = [r.seq for r in records]
        subjects = [r.subject for r in records]
        payloads = [
            r.event.payload if isinstance(r.event, Malformed) else encode(r.event) for r in records
        ]
        seg = await anyio.to_thread.run_sync(self.write_raw, seqs, subjects, payloads)
        return ArchivedSegment(seg.path.name, seg.first_seq, seg.last_seq, seg.sha256)

    async def segments(self) -> list[ArchivedSegment]:
        return await anyio.to_thread.run_sync(self._digested)

    def _digested(self) -> list[ArchivedSegment]:
        out = []
        for seg in self.listed():
            _, _, payloads = self._rows(seg.path, seg.first_seq - 1, seg.last_seq)
            out.append(
                ArchivedSegment(seg.path.name, seg.first_seq, seg.last_seq, _digest(payloads))
            )
        return out

    def write_raw(
        self, seqs: Sequence[int], subjects: Sequence[str], payloads: Sequence[bytes]
    ) -> Segment:
        """Archive these records, which must follow the archive's last one without a gap;
        the segment once read back and found equal. Raises ArchiveError."""
        if not seqs:
            raise ValueError("an empty segment")
        first, last = seqs[0], seqs[-1]
        through = self.archived_through()
        if first != through + 1 or last - first + 1 != len(seqs):
            raise ArchiveError(
                f"records {first}..{last} do not follow the archive's last, {through}, one by one"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"seg-{first:012d}-{last:012d}.parquet"
        tmp = path.with_name(f".{path.name}.tmp")
        table = pa.table(
            {
                "seq": pa.array(seqs, pa.int64()),
                "subject": pa.array(subjects, pa.string()),
                "payload": pa.array(payloads, pa.binary()),
            }
        )
        digest = _digest(payloads)
        con = duckdb.connect()
        try:
            con.register("records", table)
            con.execute(f"COPY records TO '{_quoted(tmp)}' (FORMAT parquet, COMPRESSION zstd)")
            _fsync(tmp)
            back = con.execute(
                f"SELECT seq, subject, payload FROM read_parquet('{_quoted(tmp)}') ORDER BY seq"
            ).fetchall()
        except duckdb.Error as e:
            tmp.unlink(missing_ok=True)
            raise ArchiveError(f"write {path}: {e}") from e
        finally:
            con.close()
        if not (
            [r[0] for r in back] == list(seqs)
            and [r[1] for r in back] == list(subjects)
            and _digest([bytes(r[2]) for r in back]) == digest
        ):
            tmp.unlink(missing_ok=True)
            raise ArchiveError(f"{path} did not read back as written: nothing archived")
        os.replace(tmp, path)
        _fsync(self.dir)
        return Segment(path, first, last, digest)

    async def read(
        self, after: int = 0, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        """Batches of the archived records after ``after`` up to ``until``, in order."""
        for s in await anyio.to_thread.run_sync(self.listed):
            if s.last_seq <= after or (until is not None and s.first_seq > until):
                continue
            hi = s.last_seq if until is None else min(until, s.last_seq)
            lo = max(after, s.first_seq - 1)
            while lo < hi:
                top = min(hi, lo + _READ_BATCH)
                chunk = await anyio.to_thread.run_sync(self._rows, s.path, lo, top)
                yield records_of(*chunk)
                lo = top

    @staticmethod
    def _rows(path: Path, lo: int, hi: int) -> tuple[list[int], list[str], list[bytes]]:
        con = duckdb.connect()
        try:
            rows = con.execute(
                f"SELECT seq, subject, payload FROM read_parquet('{_quoted(path)}')"
                " WHERE seq > ? AND seq <= ? ORDER BY seq",
                [lo, hi],
            ).fetchall()
        except duckdb.Error as e:
            raise ArchiveError(f"read {path}: {e}") from e
        finally:
            con.close()
        return [r[0] for r in rows], [r[1] for r in rows], [bytes(r[2]) for r in rows]


def _quoted(path: Path) -> str:
    return str(path).replace("'", "''")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ArchivedLog:
    """``events`` with its archive: reads begin in the archive and go on in the stream, so
    the whole history reads as one; every other call is the stream's."""

    def __init__(self, events: EventLog, archive: Archive) -> None:
        self.events = events
        self.archive = archive

    async def append(
        self, subject: str, event: AnyEvent, *, expected_last_subject_seq: int | None = None
    ) -> int:
        return await self.events.append(
            subject, event, expected_last_subject_seq=expected_last_subject_seq
        )

    async def append_batch(
        self,
        items: Sequence[tuple[str, AnyEvent]],
        *,
        expect_subject: str,
        expected_last_subject_seq: int,
    ) -> int:
        return await self.events.append_batch(
            items,
            expect_subject=expect_subject,
            expected_last_subject_seq=expected_last_subject_seq,
        )

    async def append_many(self, items: Sequence[tuple[str, AnyEvent]]) -> list[int]:
        return await self.events.append_many(items)

    async def last_seq(self) -> int:
        return await self.events.last_seq()

    async def count(self, subject: str) -> int:
        return await self.events.count(subject)

    async def identity(self) -> str:
        return await self.events.identity()

    async def read(
        self, after: int = 0, *, until: int | None = None
    ) -> AsyncGenerator[list[Record], None]:
        archived = await self.archive.last_seq()
        if after < archived:
            end = archived if until is None else min(until, archived)
            async with aclosing(self.archive.read(after, end)) as batches:
                async for batch in batches:
                    yield batch
            after = end
        if until is None or until > after:
            async with aclosing(self.events.read(after, until=until)) as batches:
                async for batch in batches:
                    yield batch

    def tail(
        self, after: int = 0, *, subject: str = subj.STREAM_WILDCARD
    ) -> AsyncGenerator[list[Record], None]:
        return self.events.tail(after, subject=subject)

    def follow(self, durable: str, after: int = 0) -> AsyncGenerator[list[Record], None]:
        return self.events.follow(durable, after)
