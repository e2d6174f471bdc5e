"""Where compiled policies come from, and how several sources become one snapshot.

A source (files, the cluster) only keeps its own content current. `combine` merges sources in order, the
first source defining a policy or namespace name winning, and `PolicyReloader` polls every source and
publishes a new immutable snapshot when any of them changed. Workers never see a half-applied reload.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.policy.errors import PolicyError
from webhook.policy.model import Policy
from webhook.policy.snapshot import LayeredNamespaces, NamespaceInfo, PolicySnapshot

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SourceContent:
    """What one source currently serves."""

    policies: Mapping[str, Policy] = field(default_factory=dict)
    namespaces: Mapping[str, NamespaceInfo] = field(default_factory=dict)
    errors: tuple[PolicyError, ...] = ()
    ready: bool = True
    """False until the source has loaded once (the cluster source: until its first sync)."""
    default_priority_class: str | None = None
    """The globalDefault PriorityClass the source knows of (the cluster's, or a manifest's)."""
    pod_groups_served: bool | None = None
    """Whether the cluster serves PodGroups (the cluster source; None elsewhere)."""
    native_gang_version: str | None = None
    """The kube-scheduler PodGroup version the cluster serves, "" for none (the cluster source; None elsewhere)."""
    job_gangs: bool = False
    """The cluster's Job controller keeps Jobs' gangs from their own field (the cluster source)."""


class PolicySource(Protocol):
    interval: float | None
    """How often to refresh it when shorter than the reloader's own interval (None: the reloader's)."""

    def refresh(self) -> bool:
        """Re-read what changed; True when the snapshot must be rebuilt."""

    def content(self) -> SourceContent:
        """Everything the source serves now."""



def combine(contents: Iterable[SourceContent], environment: Any) -> PolicySnapshot:
    """One snapshot of several sources; the first source that defines a policy (or namespace) name wins."""
    policies: dict[str, Policy] = {}
    namespaces: list[Mapping[str, NamespaceInfo]] = []
    errors: list[PolicyError] = []
    ready = True
    default_class: str | None = None
    pod_groups_served: bool | None = None
    native_gang_version: str | None = None
    job_gangs = False
    for content in contents:
        job_gangs = job_gangs or content.job_gangs
        if pod_groups_served is None:
            pod_groups_served = content.pod_groups_served
        if native_gang_version is None:
            native_gang_version = content.native_gang_version
        ready = ready and content.ready
        default_class = default_class or content.default_priority_class
        errors.extend(content.errors)
        namespaces.append(content.namespaces)  # not truth-tested: the cluster's layer would read every shard
        for name, policy in content.policies.items():
            if name in policies:
                errors.append(
                    PolicyError(policy.source, f"also defined in {policies[name].source}, ignored here", policy=name)
                )
            else:
                policies[name] = policy
    return PolicySnapshot.build(
        policies.values(),
        LayeredNamespaces.of(namespaces),
        errors,
        environment,
        ready=ready,
        default_priority_class=default_class,
        pod_groups_served=pod_groups_served,
        native_gang_version=native_gang_version,
        job_gangs=job_gangs,
    )


class PolicyReloader:
    """Polls the sources in a daemon thread and hands each new snapshot to `publish`.

    Polling, not inotify: Kubernetes updates mounted ConfigMaps and Secrets by swapping a symlink, which
    inotify watches on the file do not see; the cluster source's state files are replaced by rename.
    """

    def __init__(
        self,
        sources: Sequence[PolicySource],
        environment: Any,
        publish: Callable[[PolicySnapshot], None],
        *,
        interval: float = 1.0,
    ) -> None:
        self._sources = list(sources)
        self._environment = environment
        self._publish = publish
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="placer-policy-reload", daemon=True)

    def load(self) -> PolicySnapshot:
        """Refresh every source once and return the combined snapshot (used at start-up)."""
        for source in self._sources:
            source.refresh()
        return self.snapshot()

    def snapshot(self) -> PolicySnapshot:
        return combine((source.content() for source in self._sources), self._environment)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        intervals = [min(source.interval or self._interval, self._interval) for source in self._sources]
        due = [time.monotonic() + interval for interval in intervals]
        while not self._stop.wait(max(0.0, min(due, default=self._interval) - time.monotonic())):
            try:
                now = time.monotonic()
                changed = False
                # Every source that is due is refreshed (no short-circuit): each keeps its own state current.
                for index, source in enumerate(self._sources):
                    if now >= due[index]:
                        due[index] = now + intervals[index]
                        changed = source.refresh() or changed
                if changed:
                    snapshot = self.snapshot()
                    self._publish(snapshot)
                    log.info("policies reloaded: %d policies, %d errors", len(snapshot.policies), len(snapshot.errors))
            except Exception:  # the reloader must outlive any surprise; the last snapshot keeps serving
                log.exception("policy reload failed; the last good policies keep serving")
