"""How the replicas' rule counts get together: one Lease per replica, combined by the leader.

Replicas share no memory, and each one's workers count only what that replica admitted. So the controller
process of every replica publishes its recent counts (`recent_counts`) in a Lease of its own,
`placer-rule-counts-<pod>` in Placer's namespace, labelled `placer.dev/rule-counts`, with the counts in the
annotation `placer.dev/rule-counts` (JSON) and `spec.renewTime` the time of the reading. The replica that holds
the status Lease lists those Leases (one list call), adds up the counts of every replica whose reading is
younger than the window, and writes each policy's status. Per-replica Leases are how kube-apiserver
instances announce themselves too (`apiserver.kubernetes.io/identity`, KEP-1965); a Lease is small and made
for frequent renewal.

Why it is correct with any number of replicas: each replica writes only its own Lease (no two writers of
one object), the leader only reads them, and a reading carries its replica's whole window, so adding the
readings counts every admission once, whichever replica answered it. A replica that went away stops
renewing: its last reading drops out once older than the window, and the leader deletes Leases not renewed
for an hour. Cost: one small write per replica every 30 seconds at most (none while nothing changes,
one every 5 minutes to renew), one list per 30 seconds by the leader.
"""

import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.cluster.client.leader import micro_time
from webhook.cluster.health.recent_counts import RecentCounts, ReplicaWindow
from webhook.support.rule_problems import PROBLEM_OUTCOMES, Problem, RuleKey

log = logging.getLogger(__name__)

COUNTS_KEY = "placer.dev/rule-counts"
"""Label (value `v1`) of the replicas' Leases, and annotation holding the counts."""
FORMAT = "v1"
LEASE_PREFIX = "placer-rule-counts-"
PUBLISH_INTERVAL = 30.0
RENEW_INTERVAL = 300.0
FORGET_AFTER = 3600.0
"""A replica's Lease not renewed for an hour is deleted by the leader (the Pod is gone)."""
DETAIL_LIMIT = 1024
"""Characters of a problem's detail kept in the Lease (a CEL error with a long value; the log has it all)."""


def lease_name(replica: str) -> str:
    """A DNS-1123 name for the replica's Lease (its Pod name is one already, a hostname nearly)."""
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", replica.lower()).strip("-.") or "replica"
    return (LEASE_PREFIX + cleaned)[:253].rstrip("-.")


def encode_window(window: ReplicaWindow) -> str:
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for (policy, rule, outcome), count in sorted(window.counts.items()):
        counts.setdefault(policy, {}).setdefault(rule, {})[outcome] = count
    problems = [[policy, rule, outcome, round(problem.at, 3), problem.detail[:DETAIL_LIMIT]]
                for (policy, rule, outcome), problem in sorted(window.problems.items())]
    return json.dumps({"at": round(window.at, 3), "since": round(window.since, 3), "counts": counts,
                       "problems": problems}, separators=(",", ":"))


def decode_window(text: str) -> ReplicaWindow | None:
    """The reading in a Lease's annotation, or None when it is not one (another version, damaged)."""
    try:
        payload = json.loads(text)
        at, since = float(payload["at"]), float(payload["since"])
        counts: dict[RuleKey, int] = {}
        for policy, rules in dict(payload.get("counts") or {}).items():
            for rule, outcomes in dict(rules).items():
                for outcome, count in dict(outcomes).items():
                    counts[(str(policy), str(rule), str(outcome))] = int(count)
        problems: dict[RuleKey, Problem] = {}
        for policy, rule, outcome, when, detail in payload.get("problems") or []:
            if outcome in PROBLEM_OUTCOMES:
                problems[(str(policy), str(rule), str(outcome))] = Problem(float(when), str(detail))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return ReplicaWindow(at, since, counts, problems)


class ReplicaPublisher:
    """Publishes this replica's reading to its Lease, at most every `interval` seconds."""

    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        replica: str,
        counts: RecentCounts,
        interval: float = PUBLISH_INTERVAL,
        renew: float = RENEW_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._namespace = namespace
        self.replica = replica
        self.name = lease_name(replica)
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._counts = counts
        self._interval = interval
        self._renew = renew
        self._monotonic = monotonic
        self._next = 0.0
        self._written: tuple[str, float] | None = None
        """What was last written (counts and problems, without the time) and when (monotonic)."""
        self._lease: dict[str, Any] | None = None

    def publish_if_due(self) -> None:
        """Read the window and write it when it changed (or is due for renewal); never raises."""
        now = self._monotonic()
        if now < self._next:
            return
        self._next = now + self._interval
        window = self._counts.read()
        content = encode_window(ReplicaWindow(0.0, 0.0, window.counts, window.problems))
        if self._written is not None and self._written[0] == content and now - self._written[1] < self._renew:
            return
        try:
            written = self._write(window)
        except (ApiError, TransportError) as error:
            log.warning("rule counts of replica %s not published: %s", self.replica, error)
            self._lease = None  # read it again next time
            return
        if written:
            self._written = (content, now)

    def _write(self, window: ReplicaWindow) -> bool:
        """Create or update the Lease; False when it changed or went under us (written next round)."""
        moment = datetime.fromtimestamp(window.at, UTC)
        metadata = {"name": self.name, "namespace": self._namespace, "labels": {COUNTS_KEY: FORMAT},
                    "annotations": {COUNTS_KEY: encode_window(window)}}
        spec = {"holderIdentity": self.replica, "leaseDurationSeconds": int(self._counts.window),
                "renewTime": micro_time(moment)}
        if self._lease is None:
            try:
                self._lease = self._api.get(f"{self._collection}/{self.name}")
            except ApiError as error:
                if error.code != 404:
                    raise
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                        "spec": {**spec, "acquireTime": micro_time(moment)}}
                self._lease = self._api.create(self._collection, body)
                return True
        lease = self._lease
        old_metadata = dict(lease.get("metadata") or {})
        body = {**lease, "metadata": {**old_metadata, **metadata,
                                      "resourceVersion": old_metadata.get("resourceVersion")},
                "spec": {**dict(lease.get("spec") or {}), **spec}}
        try:
            self._lease = self._api.replace(f"{self._collection}/{self.name}", body)
        except ApiError as error:
            self._lease = None  # 409 (someone edited it) or 404 (deleted): read or create it next round
            if error.code not in (404, 409):
                raise
            self._next = 0.0
            return False
        return True


def collect(
    api: KubeApi, namespace: str, *, now: float, window: float, forget_after: float = FORGET_AFTER,
) -> dict[str, ReplicaWindow]:
    """The readings of every replica younger than the window, by replica (the leader's side). Leases not
    renewed for `forget_after` seconds are deleted."""
    collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    found = api.get(collection, {"labelSelector": COUNTS_KEY})
    readings: dict[str, ReplicaWindow] = {}
    for lease in found.get("items") or []:
        metadata: Mapping[str, Any] = lease.get("metadata") or {}
        reading = decode_window(str((metadata.get("annotations") or {}).get(COUNTS_KEY) or ""))
        replica = str((lease.get("spec") or {}).get("holderIdentity") or metadata.get("name"))
        if reading is None:
            continue
        if now - reading.at > forget_after:
            _forget(api, f"{collection}/{metadata.get('name')}", replica)
        elif now - reading.at <= window:
            readings[replica] = reading
    return readings


def _forget(api: KubeApi, path: str, replica: str) -> None:
    try:
        api.delete(path)
        log.info("rule counts of replica %s deleted: not renewed for an hour", replica)
    except (ApiError, TransportError) as error:
        log.warning("rule counts of replica %s not deleted: %s", replica, error)
