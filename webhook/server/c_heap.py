"""glibc's heap, as a worker needs it: one arena for every thread, trimmed after large requests.

A worker decodes a large review and CEL converts it in whichever pool thread serves the request. glibc gives
each thread its own arena, and `malloc_trim` does not hand back what was freed in those (measured: four
threads serving one dense 512 KiB review after another kept 20-30 MiB more per worker than one thread did;
with one arena, none). The GIL already serialises Python's allocations, so the arenas saved no contention.
Elsewhere than glibc both are no-ops.
"""

import ctypes
import ctypes.util
from collections.abc import Callable

M_ARENA_MAX = -8
"""mallopt's parameter for the most arenas the process may have (malloc.h)."""


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def use_one_arena() -> bool:
    """Make every thread started from now on allocate from the main arena; whether the C library agreed.
    Called in each worker before its threads start."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None) if libc is not None else None
    return bool(mallopt(M_ARENA_MAX, 1)) if mallopt is not None else False


def heap_trimmer() -> Callable[[], None]:
    """glibc's `malloc_trim(0)`, which hands freed heap pages back to the kernel; a no-op elsewhere."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None) if libc is not None else None
    if trim is None:
        return lambda: None

    def trim_heap() -> None:
        trim(0)

    return trim_heap
