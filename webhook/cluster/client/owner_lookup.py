"""A Pod's controller owner, read from the API server when an exemption seal must be checked on it.

An exempt user's workload carries Placer's seal on its templates (`webhook.engine.exemption_seal`); its pods,
created by a controller, are exempt when that controller's object (their owner) has a sealed template. The
owner is read live, by the name in the Pod's owner reference, and must carry the reference's uid: a reference
to an object that was deleted and created again, or that never existed, finds nothing. This read happens only
for a Pod an Enforced policy would otherwise refuse and a Kubernetes controller creates, so it costs nothing
on the common path. Needs `get` on the owner's resource (deploy/base/rbac.yaml).
"""

import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.support.typing import JSONObject

log = logging.getLogger(__name__)

MAX_WAIT_SECONDS = 2.0


class OwnerLookup:
    """`(namespace, ownerReference, deadline)` -> the owner object with that uid, or None (`exemption_seal`)."""

    def __init__(self, api: KubeApi, *, max_wait: float = MAX_WAIT_SECONDS) -> None:
        self._api = api
        self._max_wait = max_wait

    def __call__(self, namespace: str, owner: Mapping[str, Any], deadline: float | None) -> JSONObject | None:
        path = owner_path(namespace, owner)
        if path is None:
            return None
        budget = self._max_wait if deadline is None else min(self._max_wait, deadline - time.monotonic())
        if budget <= 0.05:
            return None
        try:
            found = self._api.get(path, timeout=budget)
        except (ApiError, TransportError) as error:
            log.warning("owner %s of a pod could not be read: %s", path, error)
            return None
        metadata = found.get("metadata")
        uid = metadata.get("uid") if isinstance(metadata, dict) else None
        return found if uid and uid == owner.get("uid") else None


def owner_path(namespace: str, owner: Mapping[str, Any]) -> str | None:
    """`/apis/apps/v1/namespaces/ns/replicasets/name` for an owner reference (every kind Placer handles
    pluralises with a plain `s`); None when the reference lacks a field."""
    api_version, kind, name = (owner.get(key) for key in ("apiVersion", "kind", "name"))
    if not all(isinstance(value, str) and value for value in (api_version, kind, name)) or not namespace:
        return None
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{quote(namespace, safe='')}/{str(kind).lower()}s/{quote(str(name), safe='')}"
