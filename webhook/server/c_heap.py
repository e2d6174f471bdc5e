"""glibc's heap, trimmed after large requests so that a worker's RSS returns to its size before.

`malloc_trim(0)` hands freed heap pages back to the kernel; elsewhere than glibc this is a no-op.
"""

import ctypes
import ctypes.util
from collections.abc import Callable


def heap_trimmer() -> Callable[[], None]:
    """glibc's `malloc_trim(0)`, or a function that does nothing where there is no such call."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        libc = None
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return lambda: None

    def trim_heap() -> None:
        trim(0)

    return trim_heap
