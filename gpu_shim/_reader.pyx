# cython: language_level=3
"""Reader of a container's shared usage region (see gpu_shim/src/fgpu_region.h).

Reading never stops the processes writing: counters are atomics, each ring
record is seqlock-protected, and the slice is read once when the region is
opened (its file never changes).  All methods raise
gpu_shim.usage.RegionClosed after close().
"""

import os

from libc.stdlib cimport free, malloc
from libc.string cimport memset

from gpu_shim.usage import (
    DeviceUsage,
    Happening,
    HappeningKind,
    ProcessSlot,
    RegionClosed,
    RegionInvalid,
    RegionNotFound,
)

MAX_DEVICES = FGPU_MAX_DEVICES
MAX_SLOTS = FGPU_MAX_SLOTS
RING_SIZE = FGPU_RING_SIZE
SHARE_FULL = FGPU_SHARE_FULL  # an SM share of the whole device, in parts per million
SLICE_SUFFIX = FGPU_SLICE_SUFFIX.decode()


cdef object _raise_open_error(int rc, str path):
    err = -rc
    if err == 2:  # ENOENT
        raise RegionNotFound(path)
    if err == 22:  # EINVAL
        raise RegionInvalid(f"{path}: not a gpu_shim region of this version (or its slice)")
    raise OSError(err, os.strerror(err), path)


cdef class Region:
    """One container's region: its slice (read once) and its counters, mapped
    read-write (reclaiming writes)."""

    cdef fgpu_region *_r
    cdef readonly str path
    cdef readonly str slice_path

    def __cinit__(self):
        self._r = NULL

    def __init__(self, path, *, _create=False, mem_limits=(), sm_shares_ppm=()):
        cdef fgpu_config cfg
        cdef fgpu_region *r = NULL
        cdef int rc
        cdef size_t i
        self.path = os.fspath(path)
        self.slice_path = self.path + SLICE_SUFFIX
        limits = [int(v) for v in mem_limits]
        shares = [int(v) for v in sm_shares_ppm]
        ndev = max(len(limits), len(shares))
        if ndev > FGPU_MAX_DEVICES:
            raise ValueError(f"at most {FGPU_MAX_DEVICES} devices")
        if any(v < 0 for v in limits) or not all(0 <= v <= FGPU_SHARE_FULL for v in shares):
            raise ValueError(f"mem_limits must be >= 0 and sm_shares_ppm in [0, {SHARE_FULL}]")
        memset(&cfg, 0, sizeof(cfg))
        cfg.ndev = ndev
        for i in range(ndev):
            cfg.mem_limit[i] = limits[i] if i < len(limits) else 0
            cfg.sm_share_ppm[i] = shares[i] if i < len(shares) else FGPU_SHARE_FULL
        encoded = self.path.encode()
        if _create:
            rc = fgpu_region_create(encoded, &cfg, &r)
        else:
            rc = fgpu_region_open(encoded, 0, &cfg, &r)
        if rc != 0:
            _raise_open_error(rc, self.path)
        self._r = r

    @classmethod
    def create(cls, path, mem_limits=(), sm_shares_ppm=()):
        """Publish the region's slice and make its counters, both new (replacing any
        earlier ones: an older version's too).  Processes that opened the region before
        keep what they mapped and read: create a region before its container starts."""
        return cls(path, _create=True, mem_limits=mem_limits, sm_shares_ppm=sm_shares_ppm)

    def __dealloc__(self):
        if self._r != NULL:
            fgpu_region_close(self._r)
            self._r = NULL

    cdef fgpu_region *_get(self) except NULL:
        if self._r == NULL:
            raise RegionClosed(self.path)
        return self._r

    def close(self):
        if self._r != NULL:
            fgpu_region_close(self._r)
            self._r = NULL

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def device(self, int index):
        """Usage of one device."""
        cdef fgpu_region *r = self._get()
        cdef fgpu_device_stats s
        if fgpu_region_device(r, index, &s) != 0:
            raise ValueError(f"device {index} out of range")
        return DeviceUsage(
            index=s.index,
            limit=s.limit,
            in_use=s.in_use,
            peak=s.peak,
            launches=s.launches,
            throttled_ns=s.throttled_ns,
            refusals=s.refusals,
            charged_ns=s.charged_ns,
            sm_share_ppm=s.sm_share_ppm,
        )

    def devices(self):
        """Configured devices, plus any other device with activity, by index."""
        cdef fgpu_region *r = self._get()
        ndev = fgpu_region_ndev(r)
        out = []
        for d in range(FGPU_MAX_DEVICES):
            u = self.device(d)
            if d < ndev or u.peak or u.launches or u.refusals:
                out.append(u)
        return out

    def processes(self):
        """Slots in use (alive or awaiting reclaim)."""
        cdef fgpu_region *r = self._get()
        cdef fgpu_process p
        out = []
        for i in range(FGPU_MAX_SLOTS):
            if fgpu_region_process(r, i, &p) == 1:
                out.append(
                    ProcessSlot(
                        slot=p.slot,
                        pid=p.pid,
                        start_time=p.start_time,
                        alive=bool(p.alive),
                        bytes=tuple(p.bytes[d] for d in range(FGPU_MAX_DEVICES)),
                    )
                )
        return out

    def drain_ring(self, after=0):
        """Happenings with seq > after, oldest first (a gap in seq = records lost)."""
        cdef fgpu_region *r = self._get()
        cdef fgpu_happening *buf = <fgpu_happening *>malloc(
            FGPU_RING_SIZE * sizeof(fgpu_happening))
        cdef uint64_t next_after = 0
        cdef uint64_t lost = 0
        cdef size_t n, i
        if buf == NULL:
            raise MemoryError()
        try:
            n = fgpu_region_drain(r, after, buf, FGPU_RING_SIZE, &next_after, &lost)
            out = []
            for i in range(n):
                h = buf[i]
                out.append(
                    Happening(
                        seq=h.seq,
                        kind=HappeningKind.from_code(h.kind),
                        device=None if h.device < 0 else h.device,
                        pid=h.pid,
                        slot=None if h.slot >= FGPU_MAX_SLOTS else h.slot,
                        value=h.value,
                        value2=h.value2,
                        time_ns=h.time_ns,
                    )
                )
            return out
        finally:
            free(buf)

    def reclaim_dead(self):
        """Give back the bytes of processes that died holding a slot; returns bytes."""
        cdef fgpu_region *r = self._get()
        cdef uint64_t n
        with nogil:
            n = fgpu_region_reclaim_dead(r)
        return n
