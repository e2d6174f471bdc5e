"""JSON out, as bytes, fast: orjson, and the standard encoder for what orjson refuses.

Every admission encodes its response and its log line; orjson does both several times faster than `json`.
orjson refuses a few things JSON text can carry (a lone surrogate in a string, an integer beyond 64 bits):
those go through the standard encoder, which writes them as JSON allows.
"""

import json
from collections.abc import Callable
from typing import Any

import orjson


def encode_json(payload: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """Compact JSON as UTF-8 bytes; `default` converts what JSON has no type for (as `json.dumps`)."""
    try:
        return orjson.dumps(payload, default=default)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(payload, separators=(",", ":"), default=default).encode()
