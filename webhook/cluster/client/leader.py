"""Lease-based leader election (coordination.k8s.io/v1), so that exactly one replica writes policy status.

The algorithm is client-go's: the holder renews `spec.renewTime` every few seconds; another candidate takes
the Lease over only after it has seen the same record unchanged for a whole `leaseDurationSeconds` by its
*own* clock (clocks of different nodes are never compared). Every write carries the `resourceVersion` it
read, so two candidates can never both win (the loser gets 409 Conflict).
"""

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from webhook.cluster.client.api import ApiError, KubeApi, TransportError

log = logging.getLogger(__name__)


def micro_time(moment: datetime) -> str:
    """metav1.MicroTime as the API server writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        monotonic: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self._name = name
        self._namespace = namespace
        self.identity = identity
        self._lease_seconds = lease_seconds
        self._monotonic = monotonic
        self._now = now
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None

    @property
    def is_leader(self) -> bool:
        """True while our last successful renewal is younger than two thirds of the lease duration.

        Stopping before the Lease can expire leaves a margin in which no other replica can have taken over.
        """
        deadline = self._lease_seconds * 2 / 3
        return self._renewed_at is not None and self._monotonic() - self._renewed_at < deadline

    def try_acquire_or_renew(self) -> bool:
        """One round of the election; returns whether this process leads now. Never raises."""
        try:
            self._round()
        except (ApiError, TransportError) as error:
            log.warning("leader election: %s", error)
        return self.is_leader

    def release(self) -> None:
        """Give the Lease up on shutdown so another replica takes over at once instead of after a timeout."""
        if not self.is_leader:
            return
        try:
            lease = self._api.get(self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") == self.identity:
                spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=micro_time(self._now()))
                self._api.replace(self._path, {**lease, "spec": spec})
        except (ApiError, TransportError) as error:
            log.warning("leader election: could not release the Lease: %s", error)
        self._renewed_at = None

    def _round(self) -> None:
        try:
            lease = self._api.get(self._path)
        except ApiError as error:
            if error.code != 404:
                raise
            self._create()
            return
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, self._monotonic()
        duration = spec.get("leaseDurationSeconds") or self._lease_seconds
        held_by_other = holder and holder != self.identity
        if held_by_other and self._monotonic() - self._observed_at < duration:
            self._renewed_at = None
            return
        now = micro_time(self._now())
        transitions = int(spec.get("leaseTransitions") or 0)
        new_spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._lease_seconds,
            "acquireTime": spec.get("acquireTime") if holder == self.identity else now,
            "renewTime": now,
            "leaseTransitions": transitions if holder == self.identity else transitions + 1,
        }
        started = self._monotonic()
        try:
            self._api.replace(self._path, {**lease, "spec": new_spec})
        except ApiError as error:
            if error.code == 409:  # someone else wrote first; we are not the leader this round
                self._renewed_at = None
                return
            raise
        if holder != self.identity:
            log.info("leader election: %s now holds Lease %s/%s", self.identity, self._namespace, self._name)
        self._renewed_at = started

    def _create(self) -> None:
        now = micro_time(self._now())
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._lease_seconds,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        started = self._monotonic()
        try:
            self._create_in_namespace(body)
        except ApiError as error:
            if error.code == 409:  # created by another candidate meanwhile
                return
            raise
        log.info("leader election: %s created Lease %s/%s", self.identity, self._namespace, self._name)
        self._renewed_at = started

    def _create_in_namespace(self, body: dict[str, Any]) -> None:
        """Create the Lease; when its namespace does not exist, create that first (out of the cluster only:
        in a Pod the namespace is the Pod's own). The API server answers a create in a missing namespace with
        404 (NamespaceLifecycle admission, staging/src/k8s.io/apiserver/pkg/admission/plugin/namespace/
        lifecycle/admission.go, `Lifecycle.Admit`)."""
        try:
            self._api.create(self._collection, body)
            return
        except ApiError as error:
            if error.code != 404:
                raise
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self._namespace}}
        try:
            self._api.create("/api/v1/namespaces", namespace)
            log.info("leader election: created namespace %s for Lease %s", self._namespace, self._name)
        except ApiError as error:
            if error.code != 409:
                raise
        self._api.create(self._collection, body)
