"""python -m mtpedge.runtime.kernels: build (or find) mtpedge's kernel library and say which path it runs."""

import sys

from . import KernelsUnavailable, kernel_path, library

try:
    path = library()
except KernelsUnavailable as err:
    sys.exit(f"error: {err}")
print(f"{path} ({kernel_path(path)})")
