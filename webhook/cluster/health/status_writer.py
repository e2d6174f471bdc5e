"""Writing each SchedulingPolicy's `status` from the leader: only what changed, never twice in a row.

A status write comes back as a MODIFIED event before the next round reads it; the fingerprint of what was
written (without transition times) keeps the same status from being written again for 30 seconds, and a
write the API server refused is tried again after 10.

While nothing changes, nothing is computed: once a round found every status as desired, the next rounds with
the same inputs (the policy store the reflector handed over, the replicas' readings, the compiled policies,
what the API server serves: `unchanged`) end at once, so the leader's idle second costs the same with 500
policies as with 5. The readings are read again every 30 seconds (`PUBLISH_INTERVAL`): that is when the
counts can change, and the only time an idle leader looks at every policy.
"""

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.health.policy_health import PolicyHealth
from webhook.cluster.health.status import PolicyOutcome, desired_status, status_differs
from webhook.engine.configuration import Finding
from webhook.support.json_bytes import encode_json

log = logging.getLogger(__name__)

REWRITE_AFTER = 30.0
RETRY_AFTER = 10.0
PARALLEL_WRITES = 8
"""Status patches in flight at once: each waits on the API server's round trip (an etcd write), not on us."""


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    """What the controller compiled of one SchedulingPolicy object."""

    key: tuple[Any, ...]
    outcome: PolicyOutcome
    document: Mapping[str, Any] | None
    """The object itself when it compiled."""
    pod_group_findings: tuple[Finding, ...] = ()
    """What to say on the policy if the API server does not serve PodGroups (its createPodGroup rules)."""
    native_gang_findings: tuple[Finding, ...] = ()
    """What to say if it serves no kube-scheduler PodGroup API (its `scheduler: native` rules)."""


class StatusWriter:
    def __init__(self, api: KubeApi, collection: str, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._api = api
        self._collection = collection
        self._monotonic = monotonic
        self._written: dict[str, tuple[bytes, float]] = {}
        self._settled: tuple[object, ...] | None = None
        """The inputs of the last round that found every status as desired."""
        self._pool: ThreadPoolExecutor | None = None

    def forget(self) -> None:
        """Leadership lost: what was written says nothing about what the next leader will find."""
        self._written.clear()
        self._settled = None

    def unchanged(self, inputs: tuple[object, ...]) -> bool:
        """Nothing the statuses are computed from changed since a round found them all as desired: each input
        the same object (reflectors and readings hand over a new one on every change) or an equal scalar."""
        settled = self._settled
        return settled is not None and len(settled) == len(inputs) and all(
            a is b or (isinstance(a, (str, int)) and a == b) for a, b in zip(settled, inputs, strict=True))

    def write(
        self,
        policies: Mapping[str, Mapping[str, Any]],
        compiled: Mapping[str, CompiledPolicy],
        *,
        health: Mapping[str, PolicyHealth] | None,
        health_known: bool,
        pod_groups_served: bool | None,
        native_gang_version: str | None = None,
        inputs: tuple[object, ...] | None = None,
    ) -> None:
        """`native_gang_version`: the kube-scheduler PodGroup version served, "" for none (None: not known).
        `inputs`: what the statuses were computed from; when every one turns out as desired, `unchanged(inputs)`
        is True until one of them changes."""
        now = self._monotonic()
        self._settled, settled = None, True
        due: list[tuple[str, dict[str, Any], bytes]] = []
        for name, obj in policies.items():
            policy = compiled.get(name)
            if policy is None:
                continue
            current = obj.get("status") if isinstance(obj.get("status"), dict) else None
            findings = policy.pod_group_findings if pod_groups_served is False else ()
            if native_gang_version == "":
                findings = (*findings, *policy.native_gang_findings)
            desired = desired_status(policy.outcome, current, datetime.now(UTC), policy=name,
                                     health=health.get(name) if health is not None else None, findings=findings,
                                     health_known=health_known)
            if not status_differs(current, desired):
                continue
            settled = False
            fingerprint = encode_json({**desired, "conditions": [
                {k: v for k, v in c.items() if k != "lastTransitionTime"} for c in desired["conditions"]]})
            written = self._written.get(name)
            if written is not None and written[0] == fingerprint and now - written[1] < REWRITE_AFTER:
                continue  # written already; the watch has not delivered it yet
            due.append((name, desired, fingerprint))
        self._send(due, now)
        self._settled = inputs if settled else None

    def _send(self, due: list[tuple[str, dict[str, Any], bytes]], now: float) -> None:
        """The status patches, `PARALLEL_WRITES` at a time: one round writes 500 new policies' statuses in
        the time of 500 / PARALLEL_WRITES round trips. A transport error (the API server away) ends the round
        after its batch; the next round writes what is left."""
        for start in range(0, len(due), PARALLEL_WRITES):
            batch = due[start:start + PARALLEL_WRITES]
            outcomes = list(self._executor().map(self._patch, batch)) if len(batch) > 1 else [self._patch(batch[0])]
            away = False
            for (name, desired, fingerprint), error in zip(batch, outcomes, strict=True):
                if isinstance(error, TransportError):
                    log.warning("status of SchedulingPolicy %s not written: %s", name, error)
                    away = True
                elif isinstance(error, ApiError):
                    if error.code != 404:
                        log.warning("status of SchedulingPolicy %s not written: %s", name, error)
                        self._written[name] = (fingerprint, now - REWRITE_AFTER + RETRY_AFTER)
                else:
                    self._written[name] = (fingerprint, now)
                    log.info("status of SchedulingPolicy %s: Ready=%s Healthy=%s", name,
                             desired["conditions"][0]["status"], desired["conditions"][1]["status"])
            if away:
                return

    def _patch(self, item: tuple[str, dict[str, Any], bytes]) -> ApiError | TransportError | None:
        name, desired, _ = item
        try:
            self._api.merge_patch(f"{self._collection}/{name}/status", {"status": desired})
        except (ApiError, TransportError) as error:
            return error
        return None

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(PARALLEL_WRITES, thread_name_prefix="placer-status")
        return self._pool
