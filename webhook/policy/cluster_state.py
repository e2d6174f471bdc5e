"""The cluster's policies as one file, written by the controller process and read by every worker.

One process per replica list+watches the API server (`webhook/kube/controller.py`) and writes what serves
to a JSON file, replaced by rename so a reader sees the old file or the new one, never a part. Every gunicorn
worker polls that one file, so all workers serve the same policies, and the API server carries one watch per
replica instead of one per worker. The controller has already compiled each document and keeps only good
versions (the last good one when an update does not compile); workers recompile them for their own CEL
environment, which is deterministic.
"""

import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.policy.compiler import PolicyCompiler
from webhook.policy.errors import PolicyError
from webhook.policy.files import Fingerprint, file_fingerprint
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo
from webhook.policy.sources import SourceContent

log = logging.getLogger(__name__)

CLUSTER_SOURCE = "cluster"
STATE_FORMAT = 1


@dataclass(frozen=True, slots=True)
class ClusterState:
    generation: int
    """Increases with every write, so logs and /readyz can tell which state a worker serves."""
    synced: bool
    policies: Sequence[Mapping[str, Any]] = ()
    """SchedulingPolicy objects that serve (each the last version that compiled)."""
    errors: Sequence[PolicyError] = ()
    namespaces: Mapping[str, NamespaceInfo] = field(default_factory=dict)
    default_priority_class: str | None = None
    """The cluster's globalDefault PriorityClass, if any."""


def write_state(path: Path, state: ClusterState) -> None:
    """Write atomically: a temporary file in the same directory, then rename over the old one."""
    payload = {
        "format": STATE_FORMAT,
        "generation": state.generation,
        "synced": state.synced,
        "policies": list(state.policies),
        "errors": [
            {"source": e.source, "message": e.message, "policy": e.policy, "rule": e.rule, "field": e.field}
            for e in state.errors
        ],
        "namespaces": {
            name: {"labels": dict(ns.labels), "annotations": dict(ns.annotations), **ns.rest}
            for name, ns in state.namespaces.items()
        },
        "defaultPriorityClass": state.default_priority_class,
    }
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as output:
            json.dump(payload, output, separators=(",", ":"))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_state(path: Path) -> ClusterState:
    """The state in `path`; OSError or ValueError when it is missing or not a state file."""
    payload = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT:
        raise ValueError(f"{path}: not a Placer cluster state file (format {STATE_FORMAT})")
    namespaces = {
        str(name): NamespaceInfo(
            str(name),
            dict(entry.get("labels") or {}),
            dict(entry.get("annotations") or {}),
            {key: entry[key] for key in ("metadata", "spec", "status") if isinstance(entry.get(key), dict)},
        )
        for name, entry in (payload.get("namespaces") or {}).items()
    }
    errors = [PolicyError(**entry) for entry in payload.get("errors") or []]
    default_class = payload.get("defaultPriorityClass")
    return ClusterState(
        int(payload["generation"]),
        bool(payload["synced"]),
        list(payload.get("policies") or []),
        errors,
        namespaces,
        default_priority_class=default_class if isinstance(default_class, str) else None,
    )


class ClusterStateSource:
    """A worker's view of the cluster: the state file, recompiled whenever the controller replaces it."""

    def __init__(self, path: Path, *, compiler: PolicyCompiler) -> None:
        self._path = path
        self._compiler = compiler
        self._stamp: Fingerprint | None = None
        self._content = SourceContent(ready=False)
        self.generation: int | None = None

    def refresh(self) -> bool:
        stamp = file_fingerprint(self._path)
        if stamp is None or stamp == self._stamp:
            return False  # unchanged, or not written yet (no first sync: stay not ready)
        try:
            state = read_state(self._path)
        except (OSError, ValueError, TypeError, KeyError) as error:
            log.error("cluster state %s unreadable (%s); the last good policies keep serving", self._path, error)
            return False
        self._stamp = stamp
        self.generation = state.generation
        self._content = self._compile(state)
        return True

    def content(self) -> SourceContent:
        return self._content

    def _compile(self, state: ClusterState) -> SourceContent:
        policies: dict[str, Policy] = {}
        errors = list(state.errors)
        for document in state.policies:
            result = self._compiler.compile(document, CLUSTER_SOURCE)
            if result.policy is not None:
                policies[result.policy.name] = result.policy
            else:  # only if this worker's Placer differs from the controller's, e.g. mid-upgrade
                errors.extend(result.errors)
        return SourceContent(
            policies,
            state.namespaces,
            tuple(errors),
            ready=state.synced,
            default_priority_class=state.default_priority_class,
        )
