"""The field checks of a cluster: its version (`/version`) and its own schemas (`/openapi/v3`).

`/openapi/v3` lists one document per group-version the server serves (`{"paths": {"apis/apps/v1":
{"serverRelativeURL": ...}}}`, staging/src/k8s.io/kube-openapi/pkg/handler3/handler.go, HandleDiscovery);
each document's `components.schemas` holds that group-version's kinds, custom resources included
(apiextensions-apiserver pkg/controller/openapiv3). Only the documents of the kinds Placer admits (and
core/v1, for Namespace and PodSpec) are read. A kind whose group-version the cluster does not serve is
never admitted there, so it is not among the kinds a policy sees.
"""

from collections.abc import Callable, Mapping
from typing import Any

from webhook.policy.fields.field_check import FieldChecks
from webhook.policy.fields.schemas import KindKey, Schema, SchemaCatalog, openapi_v3_schemas
from webhook.policy.fields.versions import cluster_target_version
from webhook.workloads import all_kinds

Get = Callable[[str], Mapping[str, Any]]
"""GET a path of the API server and decode its JSON (e.g. `KubeApi.get`)."""


def served_group_versions(index: Mapping[str, Any]) -> dict[tuple[str, str], str]:
    """(group, version) → document path, from the `/openapi/v3` index (`api/v1`, `apis/apps/v1`)."""
    found: dict[tuple[str, str], str] = {}
    paths = index.get("paths")
    for path in paths if isinstance(paths, dict) else ():
        parts = str(path).split("/")
        if parts[0] == "api" and len(parts) == 2:
            found[("", parts[1])] = str(path)
        elif parts[0] == "apis" and len(parts) == 3:
            found[(parts[1], parts[2])] = str(path)
    return found


def cluster_field_checks(
    get: Get, *, version: str | None = None, catalog: SchemaCatalog | None = None,
    crds: Mapping[KindKey, Schema] | None = None,
) -> FieldChecks:
    """Field checks against the cluster behind `get`: its version (`version` when already read, e.g. by
    `versions.cluster_target_version`), and the schemas it serves. The document paths are read without
    their `?hash=`, which only makes an answer cacheable. The errors are those of `get`."""
    version = version or cluster_target_version(get)
    served = served_group_versions(get("/openapi/v3"))
    wanted = {("", "v1")} | {(kind.group, version_name) for kind in all_kinds() for version_name in kind.versions}
    documents = [get(f"/openapi/v3/{served[key]}") for key in sorted(wanted) if key in served]
    return FieldChecks(
        version,
        catalog=catalog,
        cluster=openapi_v3_schemas(version, documents),
        crds=crds,
        served=frozenset(served),
    )
