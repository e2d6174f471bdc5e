"""The runtime's error texts, as Placer shows them: one line, without the status code around it.

cel-expr-python reports errors as absl statuses (`INVALID_ARGUMENT: message [INVALID_ARGUMENT]`, several
lines for compile errors); users read the message alone.
"""

import re

RUNTIME_ITERATION_BUDGET = 10_000
"""Comprehension steps cel-expr-python 0.1.3 allows one evaluation, over all its loops (compiled in)."""
BUDGET_EXCEEDED = "Iteration budget exceeded"
"""How the runtime says an evaluation reached its budget."""

_STATUS_PREFIX = re.compile(r"^[A-Z_]+: ")


def clean_runtime_message(raw: str) -> str:
    """The first line of a runtime error, without its status code."""
    first = raw.strip().splitlines()[0] if raw.strip() else "unknown error"
    first = re.sub(r" \[[A-Z_]+\]$", "", first)
    return _STATUS_PREFIX.sub("", first)
