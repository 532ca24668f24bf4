"""Sets of ids the fold must remember for ever, in 16 bytes each.

The fold remembers every session that has ended (a second request for its id is
ignored) and every destroy request answered (one stored again is not answered again).
Kept as Python strings in a dict, each cost 100-200 bytes in every actor's fold and a
string to decode from every snapshot: the memory of a long-lived process and the start of
every actor grew with history, not with what is alive.

``IdSet`` keeps a digest of each id instead: BLAKE2b of 16 bytes (128 bits), sorted in
one ``bytes``, plus the few added since the last merge in a small set. Two different ids
share a digest with probability about n**2 / 2**129 (1e-26 for ten million ids), and an
id is made by its requester (a keyed hash of its request id, or the requester's own
choice), so a collision, found at a cost of 2**64 hashes, could only make its maker's own
request ignored. Membership is exact otherwise; ids cannot be listed back, only tested.

Pure and deterministic: the same ids added in any order give the same bytes.
"""

import hashlib
from collections.abc import Iterable, Mapping

__all__ = ["DIGEST_BYTES", "Answers", "IdSet", "digest"]

DIGEST_BYTES = 16
# Added digests wait in a set until they are this share of the sorted ones (at least
# _MIN_RECENT): each merge copies the sorted bytes once, so its cost per id added stays
# constant (64 * 16 bytes) however long the history, and the set stays a small part.
_RECENT_SHARE = 64
_MIN_RECENT = 256


def digest(id_: str) -> bytes:
    return hashlib.blake2b(id_.encode(), digest_size=DIGEST_BYTES).digest()


class IdSet:
    """An exact set of ids (see the module's docstring): ``add``, ``in``, ``len``;
    ``to_bytes`` and ``from_bytes`` save and restore it."""

    __slots__ = ("_recent", "_sorted")

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._sorted = b""
        self._recent: set[bytes] = set()
        for i in ids:
            self.add(i)

    @classmethod
    def from_bytes(cls, data: bytes) -> "IdSet":
        """The set ``to_bytes`` gave; ValueError if ``data`` cannot be one."""
        if len(data) % DIGEST_BYTES:
            raise ValueError(f"{len(data)} bytes: not a whole number of ids")
        s = cls()
        s._sorted = bytes(data)
        return s

    def to_bytes(self) -> bytes:
        """The digests, sorted: equal sets give equal bytes."""
        self._merge()
        return self._sorted

    def add(self, id_: str) -> None:
        d = digest(id_)
        if d in self._recent or self._holds(d):
            return
        self._recent.add(d)
        if len(self._recent) >= max(
            _MIN_RECENT, len(self._sorted) // DIGEST_BYTES // _RECENT_SHARE
        ):
            self._merge()

    def __contains__(self, id_: object) -> bool:
        if not isinstance(id_, str):
            return False
        d = digest(id_)
        return d in self._recent or self._holds(d)

    def __len__(self) -> int:
        return len(self._sorted) // DIGEST_BYTES + len(self._recent)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdSet) and self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"IdSet(<{len(self)} ids>)"

    def _position(self, d: bytes) -> int:
        """How many sorted digests are below ``d``."""
        data, lo, hi = self._sorted, 0, len(self._sorted) // DIGEST_BYTES
        while lo < hi:
            mid = (lo + hi) // 2
            if data[mid * DIGEST_BYTES : (mid + 1) * DIGEST_BYTES] < d:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _holds(self, d: bytes) -> bool:
        i = self._position(d) * DIGEST_BYTES
        return self._sorted[i : i + DIGEST_BYTES] == d

    def _merge(self) -> None:
        """The recent digests into the sorted bytes, in one copy of them."""
        if not self._recent:
            return
        parts: list[bytes] = []
        start = 0
        for d in sorted(self._recent):
            at = self._position(d) * DIGEST_BYTES
            parts += (self._sorted[start:at], d)
            start = at
        parts.append(self._sorted[start:])
        self._sorted = b"".join(parts)
        self._recent = set()


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
