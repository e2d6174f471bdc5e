"""Malformed AdmissionReviews, derived from the API server's real requests by seeded mutation.

Every generator is deterministic for a seed, so a failure names a case that can be replayed.
"""

import copy
import json
import random
from collections.abc import Iterator
from typing import Any

from tests.conftest import all_fixture_requests

HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, -1, 2**63, -(2**63) - 1, 10**400, 1.5, float("nan"), float("inf"), "", "x" * 100_000,
    "1.5.5", "abc", "-5", "1e400", "\u0000", "\ud7ff" * 10, [], [None], {}, {"": None}, [[[]]], {"a": {"b": {}}},
]
QUANTITIES = ["1.5.5", "abc", "-5", "1e400", "9" * 400, "1Qi", "", " ", "0x10", "NaN", "Infinity", "--1", "1e-400"]


def seeds() -> list[dict[str, Any]]:
    return [json.loads(path.read_text())["body"] for path in all_fixture_requests()]


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path into a JSON value (map keys and list indexes), the root excluded."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*prefix, key)
            yield from paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield (*prefix, index)
            yield from paths(value, (*prefix, index))


def replace(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    copied = copy.deepcopy(body)
    node = copied
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copied


def encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def wrong_types(rng: random.Random, base: dict[str, Any]) -> bytes:
    """A value of the wrong type (or a hostile one) at a random depth of the envelope or the object."""
    candidates = list(paths(base))
    return encode(replace(base, rng.choice(candidates), rng.choice(HOSTILE_VALUES)))


def bad_quantity(rng: random.Random, base: dict[str, Any]) -> bytes:
    quantity_paths = [p for p in paths(base) if len(p) >= 2 and p[-2] in ("requests", "limits", "overhead")]
    if not quantity_paths:
        return wrong_types(rng, base)
    return encode(replace(base, rng.choice(quantity_paths), rng.choice(QUANTITIES)))


def truncated(rng: random.Random, base: dict[str, Any]) -> bytes:
    raw = encode(base)
    return raw[: rng.randrange(len(raw))]


def bit_flipped(rng: random.Random, base: dict[str, Any]) -> bytes:
    raw = bytearray(encode(base))
    for _ in range(rng.randint(1, 8)):
        position = rng.randrange(len(raw))
        raw[position] ^= 1 << rng.randrange(8)
    return bytes(raw)


def deeply_nested(rng: random.Random, base: dict[str, Any]) -> bytes:
    depth = rng.choice([1_000, 10_000, 100_000])
    inner = b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
    raw = encode(replace(base, ("request", "object", "metadata"), "__INNER__"))
    return raw.replace(b'"__INNER__"', inner)


def huge_string(rng: random.Random, base: dict[str, Any]) -> bytes:
    where = rng.choice([p for p in paths(base) if isinstance(p[-1], str)])
    return encode(replace(base, where, "x" * rng.choice([10_000, 1_000_000, 5_000_000])))


MUTATORS = [wrong_types, wrong_types, wrong_types, bad_quantity, truncated, bit_flipped, deeply_nested, huge_string]


def hostile_bodies(count: int, seed: int = 1234) -> Iterator[tuple[str, bytes]]:
    """`count` (label, body) pairs; the label names the mutator and the case number for replay."""
    rng = random.Random(seed)
    bases = seeds()
    for number in range(count):
        mutator = MUTATORS[number % len(MUTATORS)] if number < len(MUTATORS) * 4 else rng.choice(MUTATORS)
        if mutator in (deeply_nested, huge_string) and rng.random() < 0.9 and number >= len(MUTATORS) * 4:
            mutator = wrong_types  # the expensive ones are covered, not repeated thousands of times
        yield f"{mutator.__name__}#{number}", mutator(rng, rng.choice(bases))
