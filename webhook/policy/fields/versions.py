"""Which Kubernetes minor a policy is checked against: the one place versions are named and read.

The offline tools take `--kubernetes-version` (default `DEFAULT`) or read the cluster's with `--kube`; the
server uses its cluster's when it has one. Anything that needs "the target" calls `target_version`, or
`cluster_target_version` with a way to GET from the API server, so every caller agrees on parsing and on
what happens outside the supported range.
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

SUPPORTED = ("1.34", "1.35", "1.36", "1.37")
"""Minors Placer checks policies against: those upstream supports, and 1.34 while providers still run it.
Each has the published schemas of the `kubernetes-validate` package (see `schemas`)."""
DEFAULT = SUPPORTED[-1]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?$")
_MINOR = re.compile(r"^(\d+)")


class VersionError(ValueError):
    """A target version Placer cannot check against (malformed, or outside `SUPPORTED`)."""


def _key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def parse_version(text: str) -> str:
    """`1.35`, `v1.35`, `1.35.2` or `v1.35.2-gke.100` as the supported minor `1.35`; VersionError else."""
    match = _VERSION.match(text.strip())
    if not match:
        raise VersionError(f"{text!r} is not a Kubernetes version (e.g. 1.36)")
    minor = f"{int(match.group(1))}.{int(match.group(2))}"
    if minor not in SUPPORTED:
        raise VersionError(f"Kubernetes {minor} is not supported (supported: {', '.join(SUPPORTED)})")
    return minor


def target_version(requested: str | None) -> str:
    """The version named on the command line (`--kubernetes-version`), or the default."""
    return DEFAULT if requested is None else parse_version(requested)


def server_version(info: Mapping[str, Any]) -> str:
    """The minor of an API server's `/version` answer (`major`/`minor`, where a provider may write `35+`,
    else `gitVersion`), clamped to the supported range: a newer cluster is checked against the newest
    schemas Placer ships, an older one against the oldest (fields it lacks are still refused by the API
    server itself when an object is written)."""
    major, minor = str(info.get("major", "")), _MINOR.match(str(info.get("minor", "")))
    if major.isdigit() and minor:
        found = f"{int(major)}.{int(minor.group(1))}"
    else:
        match = _VERSION.match(str(info.get("gitVersion", "")))
        if not match:
            raise VersionError(f"the API server's /version names no version: {dict(info)!r}")
        found = f"{int(match.group(1))}.{int(match.group(2))}"
    if _key(found) > _key(SUPPORTED[-1]):
        return SUPPORTED[-1]
    if _key(found) < _key(SUPPORTED[0]):
        return SUPPORTED[0]
    return found


def cluster_target_version(get: Callable[[str], Mapping[str, Any]]) -> str:
    """The target version of the cluster behind `get` (e.g. `KubeApi.get`), from its `/version`."""
    return server_version(get("/version"))


def newer_than(version: str) -> tuple[str, ...]:
    """Supported versions after `version`, oldest first (where a field the target lacks may appear)."""
    return tuple(found for found in SUPPORTED if _key(found) > _key(version))
