"""Kubernetes' regex library: `find` and `findAll`, with RE2 (the engine of Go's regexp and of CEL's
`matches()`): linear time whatever the pattern, so no pattern can hold a worker."""

from collections import OrderedDict
from typing import Any

import re2

from webhook.policy.cel.libraries.functions import INT, LIST_OF_STRING, STRING, CelFunctionError, Function

_CACHED_PATTERNS = 256


class PatternCache:
    """Compiled patterns, most recently used kept (a policy set uses few; a hostile one cannot grow it)."""

    def __init__(self, size: int = _CACHED_PATTERNS) -> None:
        self._size = size
        self._compiled: OrderedDict[str, Any] = OrderedDict()

    def get(self, pattern: str) -> Any:
        compiled = self._compiled.get(pattern)
        if compiled is None:
            compiled = compile_pattern(pattern)
            self._compiled[pattern] = compiled
            if len(self._compiled) > self._size:
                self._compiled.popitem(last=False)
        else:
            self._compiled.move_to_end(pattern)
        return compiled


def compile_pattern(pattern: str) -> Any:
    """An RE2 pattern, or CelFunctionError with Kubernetes' message (also used at load time for literals).
    RE2's own logging is off: a bad pattern is the rule's error, not a line on the worker's stderr."""
    options = re2.Options()
    options.log_errors = False
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0] if error.args else error
        text = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        raise CelFunctionError(f"Illegal regex: {text}") from None


def find(compiled: Any, text: str) -> str:
    match = compiled.search(text)
    return "" if match is None else str(match.group(0))


def find_all(compiled: Any, text: str, limit: int = -1) -> list[str]:
    """Go's `FindAllString`: leftmost matches left to right; an empty match right after a match is skipped."""
    found: list[str] = []
    position, previous_end = 0, -1
    while (limit < 0 or len(found) < limit) and position <= len(text):
        match = compiled.search(text, position)
        if match is None:
            break
        start, end = match.span()
        accept = True
        if end == position:  # an empty match where the search started
            accept = start != previous_end
            position += 1
        else:
            position = end
        previous_end = end
        if accept:
            found.append(str(match.group(0)))
    return found


def functions() -> list[Function]:
    patterns = PatternCache()
    return [
        Function("find", "string_find_string", (STRING, STRING), STRING,
                 lambda text, pattern: find(patterns.get(pattern), text), member=True),
        Function("findAll", "string_find_all_string", (STRING, STRING), LIST_OF_STRING,
                 lambda text, pattern: find_all(patterns.get(pattern), text), member=True),
        Function("findAll", "string_find_all_string_int", (STRING, STRING, INT), LIST_OF_STRING,
                 lambda text, pattern, limit: find_all(patterns.get(pattern), text, limit), member=True),
    ]
