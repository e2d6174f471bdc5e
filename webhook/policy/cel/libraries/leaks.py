"""What Python-implemented CEL functions cost a worker, counted so that the worker can be recycled in time.

cel-expr-python 0.1.3 never releases the argument tuple it builds for a Python function, so every call leaves
its arguments and its result behind (measured: 48 bytes for a one-argument tuple, plus each argument and the
result as Python objects; about 600 bytes for a Kubernetes value such as a Quantity, which crosses as a
protobuf message; nothing for a call without arguments that returns a bool). Placer cannot free them, so
it counts them: every library function is wrapped by `LeakAccount.wrap`, which adds a conservative estimate
of what the call left behind. The worker that owns the account asks to be replaced (gracefully, after the
request in flight) once the estimate passes its budget (`server.worker`); the budget is drawn with jitter so
that workers started together are not recycled together.

`tests/unit/test_cel_library_leaks.py` checks the estimate against the growth it measures.
"""

import random
import sys
import threading
from collections.abc import Callable
from typing import Any

MESSAGE_BYTES = 640
"""A protobuf message as an argument or a result (measured 541 to 590 bytes, rounded up)."""
OBJECT_ROUNDING = 16
"""The allocator rounds each object up: counted once per leaked object."""


class LeakAccount:
    """Bytes that Python-implemented CEL functions have left behind in this process, and the budget for them."""

    def __init__(self, budget_bytes: int | None = None, jitter: float = 0.25) -> None:
        self._lock = threading.Lock()
        self.leaked = 0
        self.calls = 0
        self.budget = None if budget_bytes is None else int(budget_bytes * (1.0 - jitter * random.random()))
        """This process's own budget: the configured one less up to `jitter` of it, drawn once."""

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """The function as registered with CEL: same arguments and result, each call counted."""
        account = self

        def counted(*arguments: Any) -> Any:
            result = function(*arguments)
            account.add(estimate(arguments, result))
            return result

        counted.__name__ = function.__name__
        counted.__doc__ = function.__doc__
        return counted

    def add(self, size: int) -> None:
        with self._lock:
            self.leaked += size
            self.calls += 1

    def exhausted(self) -> bool:
        """True once the leaked bytes reach this process's budget (never without a budget)."""
        return self.budget is not None and self.leaked >= self.budget


def estimate(arguments: tuple[Any, ...], result: Any) -> int:
    """A conservative estimate of what one call leaves behind: its argument tuple (none without arguments:
    the empty tuple is shared), each argument, and the result."""
    tuple_size = sys.getsizeof(arguments) + OBJECT_ROUNDING if arguments else 0
    return tuple_size + sum(_size(argument) for argument in arguments) + _size(result)


def _size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int) and -5 <= value <= 256:
        return 0  # CPython's cached small ints
    if isinstance(value, list | tuple):
        return sys.getsizeof(value) + OBJECT_ROUNDING + sum(_size(item) for item in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + OBJECT_ROUNDING + sum(_size(key) + _size(item) for key, item in value.items())
    if hasattr(value, "DESCRIPTOR"):
        return MESSAGE_BYTES
    return sys.getsizeof(value) + OBJECT_ROUNDING
