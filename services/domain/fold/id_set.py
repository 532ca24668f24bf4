"""Sets of ids the fold must remember for ever, in 16 bytes each.

The fold remembers every session that has ended (a second request for its id is
ignored) and every destroy request answered (one stored again is not answered again).
Kept as Python strings in a dict, each cost 100-200 bytes in every actor's fold and a
string to decode from every snapshot: the memory of a long-lived process and the start of
every actor grew with history, not with what is alive.

``IdSet`` keeps 16 bytes of each id instead: the id itself when it is short enough
(exact), else its BLAKE2b of 16 bytes (128 bits); sorted in two arrays of 64-bit halves,
plus the few added since the last merge in a small set. Two different ids share 16 bytes
with probability about n**2 / 2**129 (1e-26 for ten million ids), and an id is made by
its requester (a keyed hash of its request id, or the requester's own choice), so a
collision, found at a cost of 2**64 hashes, could only make its maker's own request
ignored. Membership is exact otherwise; ids cannot be listed back, only tested.

Pure and deterministic: the same ids added in any order give the same bytes.
"""

import hashlib
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping

__all__ = ["DIGEST_BYTES", "Answers", "IdSet", "digest"]

DIGEST_BYTES = 16
# Added digests wait in a set until they are this share of the sorted ones (at least
# _MIN_RECENT): each merge copies the sorted arrays once, so its cost per id added stays
# constant (64 * 16 bytes, in C) however long the history, and the set stays a small part.
_RECENT_SHARE = 64
_MIN_RECENT = 256
_BIG = sys.byteorder == "big"


def digest(id_: str) -> int:
    """``id_``'s 16 bytes, as a number: an id of at most 15 bytes (a session's, ``s`` and
    12 hex digits) is itself, padded, its length in the last byte (exact, and no hash to
    compute); a longer one, its BLAKE2b."""
    b = id_.encode()
    n = len(b)
    if n < DIGEST_BYTES:
        return (int.from_bytes(b, "big") << (8 * (DIGEST_BYTES - n))) | n
    return int.from_bytes(hashlib.blake2b(b, digest_size=DIGEST_BYTES).digest(), "big")


_HALF = (1 << 64) - 1


class IdSet:
    """An exact set of ids (see the module's docstring): ``add``, ``in``, ``len``;
    ``to_bytes`` and ``from_bytes`` save and restore it.

    The sorted digests are two arrays of 64-bit halves, in step: the first halves, sorted
    (``bisect`` finds one in C), and the second halves, which settle the rare tie.
    """

    __slots__ = ("_high", "_low", "_recent")

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._high = array("Q")
        self._low = array("Q")
        self._recent: set[int] = set()
        for i in ids:
            self.add(i)

    @classmethod
    def from_bytes(cls, data: bytes) -> "IdSet":
        """The set ``to_bytes`` gave; ValueError if ``data`` cannot be one."""
        if len(data) % DIGEST_BYTES:
            raise ValueError(f"{len(data)} bytes: not a whole number of ids")
        s, half = cls(), len(data) // 2
        s._high.frombytes(data[:half])
        s._low.frombytes(data[half:])
        if not _BIG:
            s._high.byteswap()
            s._low.byteswap()
        return s

    def to_bytes(self) -> bytes:
        """The first halves, sorted, then the second halves, each big-endian: equal sets
        give equal bytes."""
        self._merge()
        if _BIG:
            return self._high.tobytes() + self._low.tobytes()
        high, low = array("Q", self._high), array("Q", self._low)
        high.byteswap()
        low.byteswap()
        return high.tobytes() + low.tobytes()

    def add(self, id_: str) -> None:
        d = digest(id_)
        if d in self._recent or self._holds(d):
            return
        self._recent.add(d)
        if len(self._recent) >= max(_MIN_RECENT, len(self._high) // _RECENT_SHARE):
            self._merge()

    def __contains__(self, id_: object) -> bool:
        if not isinstance(id_, str):
            return False
        d = digest(id_)
        return d in self._recent or self._holds(d)

    def __len__(self) -> int:
        return len(self._high) + len(self._recent)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdSet) and self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"IdSet(<{len(self)} ids>)"

    def _position(self, d: int) -> int:
        """How many sorted digests are below ``d``."""
        high, low, h = self._high, self._low, d >> 64
        i = bisect_left(high, h)
        if i == len(high) or high[i] != h:
            return i
        # Ties on the first half (short ids sharing a prefix): sorted on the second.
        return bisect_left(low, d & _HALF, i, bisect_right(high, h, i))

    def _holds(self, d: int) -> bool:
        i = self._position(d)
        return i < len(self._high) and self._high[i] == d >> 64 and self._low[i] == d & _HALF

    def _merge(self) -> None:
        """The recent digests into the sorted arrays, in one copy of them."""
        if not self._recent:
            return
        high, low = self._high, self._low
        new_high, new_low = array("Q"), array("Q")
        start = 0
        for d in sorted(self._recent):
            at = self._position(d)
            new_high += high[start:at]
            new_low += low[start:at]
            new_high.append(d >> 64)
            new_low.append(d & _HALF)
            start = at
        new_high += high[start:]
        new_low += low[start:]
        self._high, self._low, self._recent = new_high, new_low, set()


class Answers:
    """Requests answered, by id: every id in an ``IdSet``, and the reason of each one
    refused (refusals are a requester's mistakes, few; carried-out ones cost 16 bytes)."""

    __slots__ = ("ids", "refused")

    def __init__(self, ids: IdSet | None = None, refused: dict[str, str] | None = None) -> None:
        self.ids = IdSet() if ids is None else ids
        self.refused = {} if refused is None else refused

    def add(self, id_: str, refused: str | None) -> None:
        self.ids.add(id_)
        if refused is not None:
            self.refused[id_] = refused

    def __contains__(self, id_: object) -> bool:
        return id_ in self.ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, id_: str) -> str | None:
        """Why ``id_`` was refused; None if it was carried out; KeyError if unanswered."""
        if id_ not in self.ids:
            raise KeyError(id_)
        return self.refused.get(id_)

    @classmethod
    def of(cls, answers: Mapping[str, str | None]) -> "Answers":
        """Request id -> None if carried out, else why it was refused."""
        out = cls()
        for id_, refused in answers.items():
            out.add(id_, refused)
        return out

    def __eq__(self, other: object) -> bool:
        """Equal to another ``Answers``, or to the mapping ``of`` takes, of the same."""
        if isinstance(other, Mapping):
            other = Answers.of(other)
        return isinstance(other, Answers) and (self.ids, self.refused) == (
            other.ids,
            other.refused,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"Answers({len(self)} ids, refused={self.refused!r})"
