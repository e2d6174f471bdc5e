"""Kubernetes' semver library (blang/semver v4 rules): strict `MAJOR.MINOR.PATCH[-pre][+build]`, or
normalized with `semver(s, true)`; compared by semantic-versioning precedence (build metadata ignored)."""

import re
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.libraries.functions import BOOL, INT, STRING, CelFunctionError, Function
from webhook.policy.cel.libraries.messages import SEMVER, Messages, canonical_of

_IDENTIFIER = r"[0-9A-Za-z-]+"
_VERSION = re.compile(
    rf"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    rf"(?:-({_IDENTIFIER}(?:\.{_IDENTIFIER})*))?(?:\+({_IDENTIFIER}(?:\.{_IDENTIFIER})*))?$")
_UINT64 = 2**64


Version = tuple[int, int, int, tuple[str, ...]]


def parse(text: str) -> Version:
    """Raises CelFunctionError."""
    match = _VERSION.match(text)
    if match is None:
        raise CelFunctionError(f"invalid semantic version: {text[:80]!r}")
    major, minor, patch = (int(part) for part in match.group(1, 2, 3))
    if max(major, minor, patch) >= _UINT64:
        raise CelFunctionError(f"invalid semantic version: {text[:80]!r}: number out of range")
    prerelease = tuple(match.group(4).split(".")) if match.group(4) else ()
    for identifier in prerelease:
        if identifier.isdigit() and len(identifier) > 1 and identifier.startswith("0"):
            raise CelFunctionError(f"invalid semantic version: {text[:80]!r}: leading zeroes in {identifier!r}")
    return major, minor, patch, prerelease


def normalize(text: str) -> str:
    """Kubernetes' normalization: no leading `v`, missing minor/patch added as 0, leading zeros removed."""
    parts = text.removeprefix("v").split(".", 2)
    for index, part in enumerate(parts):
        if len(part) > 1:
            stripped = part.lstrip("0")
            parts[index] = stripped if stripped and stripped[0].isdigit() else "0" + stripped
    if len(parts) < 3:
        if any(mark in parts[-1] for mark in "+-"):
            raise CelFunctionError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def canonical(text: str, normalized: bool = False) -> str:
    """`MAJOR.MINOR.PATCH[-pre]`: build metadata left out, so that `==` is precedence equality."""
    major, minor, patch, prerelease = parse(normalize(text) if normalized else text)
    return f"{major}.{minor}.{patch}" + ("-" + ".".join(prerelease) if prerelease else "")


def _precedence(version: Version) -> tuple[Any, ...]:
    major, minor, patch, prerelease = version
    identifiers = tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in prerelease)
    return major, minor, patch, 1 if not prerelease else 0, identifiers


def compare(left: Version, right: Version) -> int:
    a, b = _precedence(left), _precedence(right)
    return (a > b) - (a < b)


def _valid(text: str, normalized: bool) -> bool:
    try:
        canonical(text, normalized)
    except CelFunctionError:
        return False
    return True


def functions(messages: Messages) -> list[Function]:
    semver_type = cel.Type(SEMVER.full_name)

    def version(message: Any) -> Version:
        return parse(canonical_of(message, SEMVER))

    def cmp(a: Any, b: Any) -> int:
        return compare(version(a), version(b))

    return [
        Function("semver", "string_to_semver", (STRING,), semver_type,
                 lambda text: messages.make(SEMVER, canonical(text))),
        Function("semver", "string_bool_to_semver", (STRING, BOOL), semver_type,
                 lambda text, normalized: messages.make(SEMVER, canonical(text, normalized))),
        Function("isSemver", "is_semver_string", (STRING,), BOOL, lambda text: _valid(text, False)),
        Function("isSemver", "is_semver_string_bool", (STRING, BOOL), BOOL, _valid),
        Function("isGreaterThan", "semver_is_greater_than", (semver_type, semver_type), BOOL,
                 lambda a, b: cmp(a, b) == 1, member=True),
        Function("isLessThan", "semver_is_less_than", (semver_type, semver_type), BOOL,
                 lambda a, b: cmp(a, b) == -1, member=True),
        Function("compareTo", "semver_compare_to", (semver_type, semver_type), INT, cmp, member=True),
        Function("major", "semver_major", (semver_type,), INT, lambda v: version(v)[0], member=True),
        Function("minor", "semver_minor", (semver_type,), INT, lambda v: version(v)[1], member=True),
        Function("patch", "semver_patch", (semver_type,), INT, lambda v: version(v)[2], member=True),
    ]
