"""Converting a CEL null to Python without losing a reference to None.

cel-expr-python 0.1.3 returns None from `Value.plain_value()` (and `Value.value()`) for a null without
taking the reference it hands over: every null a worker converts lowers None's reference count by one, and on
Python 3.11, where None is not immortal, the worker aborts after some thousands of admissions
("Fatal Python error: none_dealloc") — a policy with a variable `object.metadata` on objects with a null
`creationTimestamp` is enough. Every conversion of a runtime value goes through `leaf_value`, which gives the
reference back. On Python ≥ 3.12 None is immortal and the extra reference is a no-op.
"""

import ctypes
from typing import Any


def leaf_value(value: Any) -> Any:
    """`value.plain_value()`, with None's reference restored when the value is null."""
    result = value.plain_value()
    if result is None:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(None))
    return result
