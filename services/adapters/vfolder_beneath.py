"""A folder's paths resolved beneath its directory, never through a link: the file
operations of the storage helper (``vfolder_helper``). Blocking; standard library only
(the helper imports this before it drops its privileges).

Every operation starts from an open descriptor of the folder's directory (``top``) and
a path a user gave, checked by ``parts`` (relative; no empty, ``.`` or ``..`` part; no
NUL; each part at most NAME_MAX bytes and the whole under PATH_MAX). The directory that
holds its last part is opened one of two ways, both of which refuse a link anywhere:

- ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``:
  the kernel resolves the whole path at once and refuses any link in it (Linux 5.6 and
  later; called through ``syscall``, which Python has no binding for);
- else a walk, one part at a time, each opened ``O_DIRECTORY | O_NOFOLLOW`` relative to
  the descriptor of the one before.

The last part is then acted on relative to that directory's descriptor and never
followed: stat'ed, unlinked and renamed as a name in that directory; opened first as
``O_PATH | O_NOFOLLOW``, checked to be a regular file, and only then opened for reading
or writing through that very descriptor (``/proc/self/fd``), so a link, a FIFO or a
device node a session planted is never opened. A session swapping a link in for a
directory at any moment gets the request refused; what was checked is what is used.

Errors: ``Refused(status, reason)``, ``status`` the HTTP status a route answers with; an
OSError nobody foresaw (EIO) goes up as it is.
"""

import contextlib
import ctypes
import errno
import hashlib
import os
import platform
import stat
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = [
    "MAX_DEPTH",
    "NAME_MAX",
    "PARTIAL_PREFIX",
    "PARTIAL_TTL_S",
    "PATH_MAX",
    "Beneath",
    "Refused",
    "Upload",
    "kernel_resolves",
    "open_top",
    "partial_name",
    "parts",
    "purge",
]

NAME_MAX = 255  # bytes of one name (ext4, XFS, Btrfs, NFS)
PATH_MAX = 4096  # bytes of a path, its NUL included
MAX_DEPTH = 256  # directories below this are neither counted nor removed (409)
# An upload is written under a hidden name beside its file, renamed into place whole.
PARTIAL_PREFIX = ".fgpu-upload."
PARTIAL_TTL_S = 7 * 86400  # a broken-off upload not resumed for this long is removed

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08
_RENAME_NOREPLACE = 1
# openat2's number is 437 on every architecture that numbers new calls alike; elsewhere
# the walk serves.
_SYS_OPENAT2 = 437 if platform.machine() in ("x86_64", "aarch64") else None
_libc = ctypes.CDLL(None, use_errno=True)


class Refused(Exception):
    """A request the folder cannot answer, with the HTTP status to refuse it with."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(top: int, path: str, flags: int) -> int:
    """``openat2(top, path, flags)`` beneath ``top``, no link anywhere. Raises OSError."""
    if _SYS_OPENAT2 is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    how = _OpenHow(flags | os.O_CLOEXEC, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
    how.resolve |= _RESOLVE_NO_MAGICLINKS
    raw = os.fsencode(path)
    for _ in range(16):  # EAGAIN: a rename raced the lookup; the kernel asks to retry
        fd = _libc.syscall(
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(top),
            ctypes.c_char_p(raw),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def kernel_resolves(top: int) -> bool:
    """Whether this kernel (and any seccomp filter in the way) resolves with openat2."""
    try:
        os.close(_openat2(top, ".", os.O_RDONLY | os.O_DIRECTORY))
    except OSError:
        return False
    return True


def parts(rel: str) -> list[str]:
    """The names of path ``rel`` (``""``: the folder itself). Raises Refused (400: not a
    relative path inside the folder, or a name too long; 414: a path too long)."""
    raw = os.fsencode(rel)
    if len(raw) >= PATH_MAX:
        raise Refused(414, f"a path of {len(raw)} bytes: at most {PATH_MAX - 1}")
    if rel.startswith("/") or "\0" in rel:
        raise Refused(400, f"{rel!r} is not a relative path inside the folder")
    names = rel.strip("/").split("/") if rel.strip("/") else []
    if any(n in ("", ".", "..") for n in names):
        raise Refused(400, f"{rel!r} is not a relative path inside the folder")
    for n in names:
        if len(os.fsencode(n)) > NAME_MAX:
            raise Refused(400, f"a name of {len(os.fsencode(n))} bytes: at most {NAME_MAX}")
    return names


def partial_name(name: str) -> str:
    """The hidden name an upload into ``name`` is written under, beside it."""
    return PARTIAL_PREFIX + hashlib.sha256(os.fsencode(name)).hexdigest()[:32]


def _refusal(e: OSError, what: str, *, missing: int = 404) -> Refused:
    """``e``, met while acting on ``what``, as the refusal it stands for; raises ``e``
    itself when it is nothing a request could cause."""
    code = e.errno
    if code == errno.ENOENT:
        if missing == 404:
            return Refused(404, f"no {what}")
        return Refused(missing, f"{what}: the folder changed meanwhile")
    if code in (errno.EACCES, errno.EPERM):
        return Refused(
            403,
            f"the storage service may not reach {what} (did a session make it as another "
            "user? there, give it to the folder's owner with chown, or chmod it a+rwX)",
        )
    if code == errno.ELOOP:
        return Refused(403, f"{what} passes through a link: links in a folder are never followed")
    if code == errno.ENAMETOOLONG:
        return Refused(400, f"{what}: a name too long")
    if code in (errno.ENOSPC, errno.EDQUOT):
        return Refused(507, f"{what}: no space left on the storage host")
    if code in (
        errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENOTEMPTY, errno.EBUSY,
        errno.EINVAL, errno.EXDEV, errno.EROFS, errno.ETXTBSY, errno.EMLINK,
    ):  # fmt: skip
        return Refused(409, f"{what}: {e.strerror}")
    raise e


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def _child_dir(d: int, name: str, *, create: bool = False) -> int:
    """Directory ``name`` in ``d``, opened (made first, 0700, if ``create``); never a
    link. Raises OSError (ENOTDIR for a link or anything else but a directory)."""
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=d)
    return os.open(name, _DIR, dir_fd=d)


def _entries(d: int) -> Iterator[tuple[str, os.stat_result]]:
    """The names in directory ``d`` and what each is (links not followed); a name gone
    meanwhile is left out."""
    with os.scandir(d) as it:
        for e in it:
            try:
                yield e.name, e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue


def _shown(name: str) -> str:
    """A name as text: bytes that are not UTF-8 shown as U+FFFD."""
    return os.fsencode(name).decode("utf-8", "replace")


def _level(d: int, name: str, what: str, *, create: bool = False) -> int | None:
    """Directory ``name`` of the folders' own levels (a storage host's, a folder's) in
    ``d``, opened; None if missing. Raises Refused."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise Refused(400, f"{name!r} names no folder")
    try:
        return _child_dir(d, name, create=create)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _refusal(e, what) from e


def open_top(root: int, host: str, vfolder_id: str, *, create: bool) -> int | None:
    """The folder directory ``<host>/<vfolder_id>`` beneath the folders' root, opened;
    made (each level 0700) if ``create``; None if it is not there. Raises Refused."""
    h = _level(root, host, f"storage host {host}", create=create)
    if h is None:
        return None
    try:
        return _level(h, vfolder_id, f"folder {vfolder_id}", create=create)
    finally:
        os.close(h)


def purge(root: int, host: str, vfolder_id: str) -> bool:
    """Delete folder ``<host>/<vfolder_id>`` and everything in it; whether it was there.
    Raises Refused (what the storage uid may not delete stays, and is named)."""
    h = _level(root, host, f"storage host {host}")
    if h is None:
        return False
    try:
        top = _level(h, vfolder_id, f"folder {vfolder_id}")
        if top is None:
            return False
        try:
            _clear(top, vfolder_id, 0)
        finally:
            os.close(top)
        try:
            os.rmdir(vfolder_id, dir_fd=h)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise _refusal(e, f"folder {vfolder_id}") from e
        return True
    finally:
        os.close(h)


def _clear(d: int, shown: str, depth: int) -> None:
    """Remove everything in directory ``d`` (named ``shown`` in errors), depth first,
    never through a link. Raises Refused."""
    if depth >= MAX_DEPTH:
        raise Refused(409, f"{shown!r} is more than {MAX_DEPTH} directories deep")
    for name, st in list(_entries(d)):
        where = f"{shown}/{_shown(name)}"
        try:
            if stat.S_ISDIR(st.st_mode):
                sub = _child_dir(d, name)
                try:
                    _clear(sub, where, depth + 1)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=d)
            else:
                os.unlink(name, dir_fd=d)
        except FileNotFoundError:
            continue  # gone meanwhile: what was asked
        except OSError as e:
            raise _refusal(e, repr(where)) from e


def _rename(sd: int, src: str, dd: int, dst: str, replace: bool) -> None:
    """Rename ``src`` in ``sd`` to ``dst`` in ``dd`` (neither followed); an existing
    ``dst`` only if ``replace``. Raises OSError (EEXIST: ``dst`` exists)."""
    if replace:
        os.rename(src, dst, src_dir_fd=sd, dst_dir_fd=dd)
        return
    renameat2 = getattr(_libc, "renameat2", None)
    if renameat2 is not None:
        if renameat2(sd, os.fsencode(src), dd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):  # EINVAL: a filesystem without it
            raise OSError(err, os.strerror(err), dst)
    # Without RENAME_NOREPLACE: a name made between the look and the rename is replaced,
    # within the folder.
    try:
        os.stat(dst, dir_fd=dd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=sd, dst_dir_fd=dd)
        return
    raise OSError(errno.EEXIST, os.strerror(errno.EEXIST), dst)


@dataclass(frozen=True, slots=True)
class _At:
    """A name in an open directory: where the last part of a path is acted on."""

    d: int
    name: str
    shown: str  # the path as the user gave it, for messages


class Beneath:
    """The operations on one folder, whose directory ``top`` is open (the caller closes
    it); ``kernel``: resolve with openat2 (see ``kernel_resolves``), else walk."""

    def __init__(self, top: int, *, kernel: bool) -> None:
        self.top = top
        self.kernel = kernel

    def open_dir(self, names: Sequence[str], shown: str, *, create: bool = False) -> int:
        """Directory ``names`` beneath the folder, opened (the folder's own directory,
        another descriptor of it, if empty); made if missing with ``create``. Raises
        Refused (403: a link on the way; 404: none; 409: a part is not a directory)."""
        if self.kernel and not create:
            try:
                return _openat2(self.top, "/".join(names) or ".", os.O_RDONLY | os.O_DIRECTORY)
            except OSError as e:
                raise self._explain(e, names, shown) from e
        d = os.open(".", _DIR, dir_fd=self.top)
        try:
            for i, name in enumerate(names):
                try:
                    sub = _child_dir(d, name, create=create)
                except OSError as e:
                    raise self._explain(e, names[: i + 1], shown) from e
                os.close(d)
                d = sub
        except BaseException:
            os.close(d)
            raise
        return d

    def _explain(self, e: OSError, names: Sequence[str], shown: str) -> Refused:
        """Why directory ``names`` could not be opened for ``shown``, in words (the look
        that tells a link from a file is for the message only: it may have changed)."""
        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
            return _refusal(e, f"directory {'/'.join(names)!r}")
        for i in range(len(names)):
            try:
                d = self.open_dir(names[:i], shown) if i else os.dup(self.top)
                try:
                    mode = os.stat(names[i], dir_fd=d, follow_symlinks=False).st_mode
                finally:
                    os.close(d)
            except (OSError, Refused):
                break
            if stat.S_ISLNK(mode):
                return _refusal(OSError(errno.ELOOP, "link"), repr(shown))
            if not stat.S_ISDIR(mode):
                return Refused(409, f"{'/'.join(names[: i + 1])!r} is not a directory")
        return Refused(409, f"{shown!r}: the folder changed while it was looked up")

    def _at(self, rel: str, *, create: bool = False) -> _At:
        """The directory holding the last part of ``rel``, open, and that name. Raises
        Refused (400: ``rel`` is the folder itself)."""
        names = parts(rel)
        if not names:
            raise Refused(400, "name a file or directory in the folder, not the folder")
        return _At(self.open_dir(names[:-1], rel, create=create), names[-1], rel)

    def listing(self, rel: str) -> list[tuple[str, str, int, float]]:
        """The entries of directory ``rel``: name, kind (file, dir, link, other), size
        (files only) and mtime, by name. Raises Refused (404: no such directory)."""
        d = self.open_dir(parts(rel), rel)
        try:
            found = [
                (_shown(n), _kind(st.st_mode), st.st_size if stat.S_ISREG(st.st_mode) else 0,
                 st.st_mtime)
                for n, st in _entries(d)
            ]  # fmt: skip
        except OSError as e:
            raise _refusal(e, f"directory {rel!r}", missing=409) from e
        finally:
            os.close(d)
        return sorted(found)

    def stat(self, rel: str) -> tuple[int | None, int | None]:
        """The size of file ``rel`` (None: none) and of an upload into it that stopped
        before its end (None: none). Raises Refused (409: not a file)."""
        try:
            at = self._at(rel)
        except Refused as e:
            if e.status == 404:
                return None, None
            raise
        try:
            return self._size(at), self._partial_size(at)
        finally:
            os.close(at.d)

    def _size(self, at: _At) -> int | None:
        try:
            st = os.stat(at.name, dir_fd=at.d, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _refusal(e, repr(at.shown)) from e
        if not stat.S_ISREG(st.st_mode):
            raise Refused(409, f"{at.shown!r} is not a file: it is a {_kind(st.st_mode)}")
        return st.st_size

    def _partial_size(self, at: _At) -> int | None:
        try:
            st = os.stat(partial_name(at.name), dir_fd=at.d, follow_symlinks=False)
        except OSError:
            return None
        mine = stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid()
        return st.st_size if mine else None

    def _open(self, at: _At, name: str, flags: int, *, own: bool = False) -> int:
        """Regular file ``name`` in ``at.d``, opened with ``flags`` through the descriptor
        that was checked (never a link, FIFO or device); with ``own``, only a file of
        this uid with one name. Raises Refused (404: none; 409: not such a file)."""
        try:
            path = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at.d)
        except OSError as e:
            raise _refusal(e, f"file {at.shown!r}") from e
        try:
            st = os.fstat(path)
            if not stat.S_ISREG(st.st_mode):
                raise Refused(409, f"{at.shown!r} is not a file: it is a {_kind(st.st_mode)}")
            if own and (st.st_uid != os.geteuid() or st.st_nlink != 1):
                raise Refused(409, f"the upload into {at.shown!r} was changed by someone else")
            try:
                return os.open(f"/proc/self/fd/{path}", flags | os.O_CLOEXEC | os.O_NOCTTY)
            except OSError as e:
                raise _refusal(e, f"file {at.shown!r}") from e
        finally:
            os.close(path)

    def open_read(self, rel: str) -> int:
        """File ``rel`` open for reading. Raises Refused (404: none; 409: not a file)."""
        at = self._at(rel)
        try:
            return self._open(at, at.name, os.O_RDONLY)
        finally:
            os.close(at.d)

    def upload(self, rel: str, offset: int, replace: bool) -> "Upload":
        """An upload into file ``rel`` from byte ``offset``: 0 starts anew, any other
        offset resumes one that stopped there. The bytes go to a hidden file beside it,
        renamed into place on ``Upload.commit``. Raises Refused (409: ``rel`` exists and
        not ``replace``, is not a file, or no upload stopped at ``offset``)."""
        at = self._at(rel, create=True)
        try:
            replaced = self._size(at)
            if replaced is not None and not replace:
                raise Refused(409, f"{rel!r} exists ({replaced} bytes): replace=true")
            part = partial_name(at.name)
            if offset == 0:
                before = self._drop(at, part)
                try:
                    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                    fd = os.open(part, flags, 0o600, dir_fd=at.d)
                except OSError as e:
                    raise _refusal(e, repr(rel), missing=409) from e
            else:
                try:
                    fd = self._open(at, part, os.O_RDWR, own=True)
                except Refused as e:
                    if e.status != 404:
                        raise
                    raise Refused(409, f"no upload into {rel!r} to resume: start at 0") from e
                before = os.fstat(fd).st_size
                if before != offset:
                    os.close(fd)
                    raise Refused(
                        409, f"the upload into {rel!r} holds {before} bytes: resume at {before}"
                    )
                os.lseek(fd, offset, os.SEEK_SET)
            return Upload(at, part, fd, offset, replaced or 0, before)
        except BaseException:
            os.close(at.d)
            raise

    @staticmethod
    def _drop(at: _At, part: str) -> int:
        """Remove what is at ``part`` (an earlier upload's bytes); their size."""
        try:
            st = os.stat(part, dir_fd=at.d, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                raise Refused(409, f"{at.shown!r} cannot be written: a directory is in the way")
            os.unlink(part, dir_fd=at.d)
        except FileNotFoundError:
            return 0
        except OSError as e:
            raise _refusal(e, repr(at.shown), missing=409) from e
        return st.st_size if stat.S_ISREG(st.st_mode) else 0

    def remove(self, rel: str, recursive: bool) -> str:
        """Remove ``rel`` (a link itself, never what it points to); a directory only if
        empty, or with everything in it if ``recursive``. What it was (file, dir, link,
        other). Raises Refused (404: none; 409: a directory not empty)."""
        at = self._at(rel)
        try:
            try:
                mode = os.stat(at.name, dir_fd=at.d, follow_symlinks=False).st_mode
                if not stat.S_ISDIR(mode):
                    os.unlink(at.name, dir_fd=at.d)
                    return _kind(mode)
                if recursive:
                    sub = _child_dir(at.d, at.name)
                    try:
                        _clear(sub, rel, 0)
                    finally:
                        os.close(sub)
                os.rmdir(at.name, dir_fd=at.d)
            except OSError as e:
                if e.errno == errno.ENOTEMPTY:
                    raise Refused(409, f"directory {rel!r} is not empty: recursive=true") from e
                raise _refusal(e, repr(rel)) from e
            return "dir"
        finally:
            os.close(at.d)

    def move(self, rel: str, to: str, replace: bool) -> None:
        """Rename ``rel`` (a file, a directory or a link itself) to ``to``, whose
        directory must exist; an existing ``to`` is replaced only if ``replace`` (a
        directory only by a directory, and only if empty). Raises Refused (404: no
        ``rel``; 409: ``to`` exists, or is inside ``rel``)."""
        src, dst = parts(rel), parts(to)
        if src and dst[: len(src)] == src:
            raise Refused(409, f"{rel!r} cannot move into itself")
        a = self._at(rel)
        try:
            b = self._at(to)
            try:
                os.stat(a.name, dir_fd=a.d, follow_symlinks=False)
                _rename(a.d, a.name, b.d, b.name, replace)
            except FileExistsError as e:
                raise Refused(409, f"{to!r} exists: replace=true") from e
            except OSError as e:
                raise _refusal(e, repr(rel)) from e
            finally:
                os.close(b.d)
        finally:
            os.close(a.d)

    def scan(self) -> tuple[int, int]:
        """The bytes of the folder's regular files and how many (links not followed,
        directories the storage uid may not read left out). Uploads broken off longer
        than PARTIAL_TTL_S ago are removed on the way."""
        d = os.open(".", _DIR, dir_fd=self.top)
        try:
            return _count(d, 0, time.time() - PARTIAL_TTL_S)
        finally:
            os.close(d)


def _count(d: int, depth: int, stale: float) -> tuple[int, int]:
    total = files = 0
    try:
        found = list(_entries(d))
    except OSError:
        return 0, 0  # removed or unreadable meanwhile: nothing to count
    for name, st in found:
        if stat.S_ISREG(st.st_mode):
            if name.startswith(PARTIAL_PREFIX) and st.st_mtime < stale and _drop_stale(d, name):
                continue
            total, files = total + st.st_size, files + 1
        elif stat.S_ISDIR(st.st_mode) and depth + 1 < MAX_DEPTH:
            try:
                sub = _child_dir(d, name)
            except OSError:
                continue  # gone, swapped for a link, or not the storage uid's to read
            try:
                more, n = _count(sub, depth + 1, stale)
            finally:
                os.close(sub)
            total, files = total + more, files + n
    return total, files


def _drop_stale(d: int, name: str) -> bool:
    """Remove a broken-off upload of this uid; whether it is gone."""
    try:
        if os.stat(name, dir_fd=d, follow_symlinks=False).st_uid == os.geteuid():
            os.unlink(name, dir_fd=d)
            return True
    except OSError:
        pass
    return False


class Upload:
    """An upload being written: ``fd`` the hidden file's descriptor at ``offset``;
    ``replaced`` the bytes of the file it will replace, ``partial`` those it found of an
    earlier upload (both counted in the folder until it is done)."""

    def __init__(
        self, at: _At, part: str, fd: int, offset: int, replaced: int, partial: int
    ) -> None:
        self._at = at
        self._part = part
        self.fd = fd
        self.offset = offset
        self.replaced = replaced
        self.partial = partial

    def _still_ours(self) -> bool:
        """Whether the hidden name is still this upload's file (a session may have moved
        or replaced it)."""
        try:
            st = os.stat(self._part, dir_fd=self._at.d, follow_symlinks=False)
        except OSError:
            return False
        mine = os.fstat(self.fd)
        return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)

    def commit(self, replace: bool) -> int:
        """Put the file in place, whole (written to disk first); its size. Raises Refused
        (409: the folder changed meanwhile, or a file appeared there and not
        ``replace``); the upload's bytes are removed then."""
        shown = repr(self._at.shown)
        try:
            os.fsync(self.fd)
            size = os.fstat(self.fd).st_size
            if not self._still_ours():
                raise Refused(409, f"{shown}: the folder changed while it was written")
            try:
                _rename(self._at.d, self._part, self._at.d, self._at.name, replace)
            except FileExistsError as e:
                raise Refused(409, f"{shown} exists: replace=true") from e
            except OSError as e:
                raise _refusal(e, shown, missing=409) from e
            os.fsync(self._at.d)
            return size
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Leave the folder as it was before this upload: what it wrote is cut off (an
        upload started at 0 leaves no file)."""
        if not self._still_ours():
            return
        try:
            if self.offset == 0:
                os.unlink(self._part, dir_fd=self._at.d)
            else:
                os.ftruncate(self.fd, self.offset)
        except OSError:
            pass  # nothing more to undo with: the next scan counts what is left

    def close(self) -> None:
        """Let go of the descriptors (what was written stays, for a resume)."""
        for fd in (self.fd, self._at.d):
            with contextlib.suppress(OSError):
                os.close(fd)
