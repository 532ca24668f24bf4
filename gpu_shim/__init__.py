"""gpu_shim: the fractional-GPU driver shim and the reader of its usage regions.

The C shim (``gpu_shim/src``, built by ``make -C gpu_shim``) stands in for
libcuda.so.1 inside a container.  This package holds the Python side: typed
usage values (:mod:`gpu_shim.usage`, pure Python) and the compiled reader
(``gpu_shim._reader``), which is imported only when a region is opened, so
``import gpu_shim`` works before the extension is built.
"""

from gpu_shim import usage
from gpu_shim.usage import *  # noqa: F403 (the package's API is usage's)

__all__ = usage.__all__
