"""Every stored workload of the kinds Placer mutates, listed from the API server (read-only).

Operator resources are listed where their CRD is installed: a kind the API server does not serve answers
404 and is left out, quietly. Lists are paged (`limit`/`continue`, as the API reference's "Retrieving large
results sets in chunks" describes: https://kubernetes.io/docs/reference/using-api/api-concepts/), so a big
cluster is read in bounded pieces. Built-in list items come without kind and apiVersion; they are filled
in, as `kubectl get -o yaml` shows them.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from webhook.cluster.client.api import ApiError, KubeApi
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind, all_kinds

PAGE = 500


@dataclass(frozen=True, slots=True)
class Served:
    kind: WorkloadKind
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.kind.group}/{self.version}" if self.kind.group else self.version

    def collection(self, namespace: str | None) -> str:
        """The collection's path, across namespaces when `namespace` is None."""
        prefix = f"/apis/{self.kind.group}/{self.version}" if self.kind.group else f"/api/{self.version}"
        scope = f"/namespaces/{quote(namespace, safe='')}" if namespace else ""
        return f"{prefix}{scope}/{self.kind.resource}"

    def object_path(self, namespace: str, name: str) -> str:
        return f"{self.collection(namespace)}/{quote(name, safe='')}"


def workload_kinds(*, include_pods: bool = True) -> list[WorkloadKind]:
    return [kind for kind in all_kinds() if include_pods or kind.kind != "Pod"]


def list_workloads(
    api: KubeApi, namespace: str | None, selector: str | None, *, include_pods: bool = True
) -> Iterator[tuple[Served, JSONObject]]:
    """(how the kind is served, object) for every workload in `namespace` (None: all) matching `selector`."""
    for kind in workload_kinds(include_pods=include_pods):
        for version in kind.versions:
            served = Served(kind, version)
            try:
                yield from _pages(api, served, namespace, selector)
            except ApiError as error:
                if error.code == 404:
                    continue  # this version (or the whole CRD) is not served: try the next version
                raise
            break


def _pages(
    api: KubeApi, served: Served, namespace: str | None, selector: str | None
) -> Iterator[tuple[Served, JSONObject]]:
    token = ""
    while True:
        query = {"limit": str(PAGE)}
        if selector:
            query["labelSelector"] = selector
        if token:
            query["continue"] = token
        listed: dict[str, Any] = api.get(served.collection(namespace), query)
        for item in listed.get("items") or []:
            if isinstance(item, dict):
                item.setdefault("apiVersion", served.api_version)
                item.setdefault("kind", served.kind.kind)
                yield served, item
        token = str((listed.get("metadata") or {}).get("continue") or "")
        if not token:
            return
