"""Build of the compiled parts of the fgpu package (metadata lives in pyproject.toml).

gpu_shim._reader is the Cython reader of the shim's shared usage regions; it
compiles gpu_shim/src/region.c, the same C the shim itself uses.  The shim
library (libcuda.so.1 stand-in) is not a Python extension: ``make -C gpu_shim``.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(
    ext_modules=cythonize(
        [
            Extension(
                "gpu_shim._reader",
                sources=["gpu_shim/_reader.pyx", "gpu_shim/src/region.c"],
                include_dirs=["gpu_shim/src"],
                depends=["gpu_shim/src/fgpu_region.h", "gpu_shim/src/region_layout.h"],
                extra_compile_args=["-std=gnu11"],
            )
        ],
        language_level=3,
        build_dir="build",  # generated C stays out of the source tree
    ),
)
