"""The namespace of an admission, when the watched state does not know it yet.

`kubectl apply -f ns.yaml -f app.yaml`, an Argo CD or Flux sync, or a Helm install creates a namespace and
its workloads within milliseconds; the controller's watch, its publication and the workers' reload take
about a second. Guessing "no labels" in that window silently skips every policy keyed on namespace labels,
and nothing ever repairs it. So a worker that meets a namespace its state does not have reads it from the
API server, within what is left of the admission's deadline, and keeps it for a short while (the watch
delivers it soon after). When the API server does not answer in time, the namespace is *unknown*: the
engine then applies each policy's failurePolicy to the policies that depend on the namespace.
"""

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import quote

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot, UnknownNamespace
from webhook.policy.sources.documents import namespace_info

log = logging.getLogger(__name__)

Resolved = NamespaceInfo | UnknownNamespace


class NamespaceLookup:
    """Resolve a namespace from the snapshot, else from a small cache, else from the API server."""

    def __init__(
        self,
        api: KubeApi | None,
        *,
        max_wait: float = 2.0,
        ttl: float = 30.0,
        capacity: int = 1024,
        monotonic: Callable[[], float] = time.monotonic,
        observe: Callable[[str], None] | None = None,
        unavailable: str | None = None,
    ) -> None:
        """`api` None: no cluster, unless `unavailable` says why the cluster cannot be asked."""
        self._api = api
        self._unavailable = unavailable
        self._max_wait = max_wait
        self._ttl = ttl
        self._capacity = capacity
        self._monotonic = monotonic
        self._observe = observe or (lambda result: None)
        self._cache: OrderedDict[str, tuple[float, NamespaceInfo]] = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, snapshot: PolicySnapshot, name: str, deadline: float | None) -> Resolved:
        """What policies see of namespace `name` for one admission.

        Without a cluster connection a namespace the snapshot does not know simply has no labels (the
        file source's Namespace manifests are all there is).
        """
        known = snapshot.namespaces.get(name)
        if known is not None or not name:
            return known or NamespaceInfo(name)
        if self._api is None:
            return NamespaceInfo(name) if self._unavailable is None else UnknownNamespace(name, self._unavailable)
        now = self._monotonic()
        with self._lock:
            cached = self._cache.get(name)
            if cached is not None and cached[0] > now:
                self._cache.move_to_end(name)
                return cached[1]
        budget = self._max_wait if deadline is None else min(self._max_wait, deadline - now)
        if budget <= 0.05:
            self._observe("timeout")
            return UnknownNamespace(name, "no time left before the API server's deadline")
        try:
            obj = self._api.get(f"/api/v1/namespaces/{quote(name, safe='')}", timeout=budget)
        except ApiError as error:
            self._observe(f"error-{error.code}")
            log.warning("namespace %s is not in the watched state and reading it failed: %s", name, error)
            return UnknownNamespace(name, f"{error.code} {error.reason}")
        except TransportError as error:
            self._observe("unreachable")
            log.warning("namespace %s is not in the watched state and the API server did not answer: %s", name, error)
            return UnknownNamespace(name, "the API server did not answer in time")
        info = namespace_info(name, obj)
        self._observe("read")
        with self._lock:
            self._cache[name] = (now + self._ttl, info)
            self._cache.move_to_end(name)
            while len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        log.info("namespace %s read from the API server (not yet in the watched state)", name)
        return info
