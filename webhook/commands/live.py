"""`placer apply --kube`: what the cluster's policies do now, read from the cluster and never written to it.

"Which policy did this, and what would it do now?" is asked of a live cluster: its SchedulingPolicies (the
ones that compile, as the webhook serves them), the namespace's real labels, the live object itself
(`deployment/web -n team-a`: its current spec, evaluated as a create, as if applied again), and its nodes
(which of them the mutated pods could land on). Only GETs and lists are sent, so read-only credentials
suffice.
"""

import argparse
import sys
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from webhook.admission.offline import DEFAULT_NAMESPACE
from webhook.cluster.client.api import ApiError, KubeApi, TransportError, api_from_flags
from webhook.cluster.client.connection import ConnectionSetupError
from webhook.cluster.client.discovery import WATCHED_FEATURES, discover
from webhook.cluster.podgroups.native_gang import job_gangs_of, native_version_of
from webhook.gang.native import API_GROUP
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.errors import PolicyError
from webhook.policy.model import Policy
from webhook.policy.snapshot import NamespaceInfo, PolicySnapshot
from webhook.policy.sources.documents import namespace_info, served_document
from webhook.policy.state.cluster_state import CLUSTER_SOURCE
from webhook.policy.state.node_facts import node_facts
from webhook.support.typing import JSONObject
from webhook.workloads import WorkloadKind, all_kinds

POLICIES = "/apis/placer.dev/v1alpha1/schedulingpolicies"
SHORT_NAMES = {"po": "pods", "deploy": "deployments", "sts": "statefulsets", "ds": "daemonsets",
               "rs": "replicasets", "cj": "cronjobs"}
"""kubectl's short names for the built-in kinds Placer mutates."""


def open_api(prog: str, args: argparse.Namespace) -> KubeApi | None:
    """The API client kubectl's `--kubeconfig` and `--context` name, or None once stderr says why there is none."""
    try:
        return api_from_flags(args.kubeconfig, args.context)
    except ConnectionSetupError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return None


def namespace_scope(args: argparse.Namespace) -> str | None:
    """The namespace of kubectl's `-n` (default `default`); None with `-A`, every namespace."""
    return None if args.all_namespaces else (args.namespace or DEFAULT_NAMESPACE)


class LiveError(Exception):
    """What was asked of the cluster cannot be answered (unknown kind, object not found, API error)."""


def cluster_snapshot(api: KubeApi, compiler: PolicyCompiler) -> PolicySnapshot:
    """The cluster's SchedulingPolicies as the webhook would serve them (those that do not compile: errors)."""
    try:
        listed = api.get(POLICIES)
    except ApiError as error:
        raise LiveError(f"cannot list SchedulingPolicies: {error}") from None
    policies: list[Policy] = []
    errors: list[PolicyError] = []
    for item in listed.get("items") or []:
        result = compiler.compile(served_document(item), CLUSTER_SOURCE)
        errors.extend(result.errors)
        if result.policy is not None:
            policies.append(result.policy)
    native, jobs = _native_gangs(api)
    return PolicySnapshot.build(policies, {}, errors, compiler.environment, native_gang_version=native,
                                job_gangs=jobs)


def _native_gangs(api: KubeApi) -> tuple[str | None, bool]:
    """The kube-scheduler PodGroup version the cluster serves and whether its Job controller keeps Jobs' gangs,
    as the webhook's controller would find them (None, False when discovery cannot be read: the rules then
    write as if a PodGroup API were served)."""
    try:
        served = discover(api, (API_GROUP,), features=WATCHED_FEATURES)
    except (ApiError, TransportError):
        return None, False
    return native_version_of(served), job_gangs_of(served)


def read_nodes(api: KubeApi) -> list[tuple[str, dict[str, Any]]] | None:
    """Every node as the scheduler's filters read it (`node_facts`); None when the credentials may not list
    nodes (then no node fit is shown)."""
    try:
        listed = api.get("/api/v1/nodes")
    except ApiError as error:
        if error.code == 403:
            return None
        raise LiveError(f"cannot list nodes: {error}") from None
    items = [item for item in listed.get("items") or [] if isinstance(item, dict)]
    return [(str((item.get("metadata") or {}).get("name") or ""), node_facts(item)) for item in items]


def read_namespaces(api: KubeApi, names: Iterable[str]) -> dict[str, NamespaceInfo]:
    """Each namespace as `namespaceObject` shows it; one that does not exist has no labels."""
    found: dict[str, NamespaceInfo] = {}
    for name in dict.fromkeys(names):
        try:
            found[name] = namespace_info(name, api.get(f"/api/v1/namespaces/{quote(name, safe='')}"))
        except ApiError as error:
            if error.code != 404:
                raise LiveError(f"cannot read namespace {name}: {error}") from None
            found[name] = NamespaceInfo(name)
    return found


def resolve_kind(reference: str) -> WorkloadKind:
    """`deployment`, `deployments`, `deploy`, `Deployment.apps`, `pytorchjob.kubeflow.org`: the kind Placer
    mutates, as kubectl would resolve it."""
    name, _, group = reference.partition(".")
    lowered = SHORT_NAMES.get(name.lower(), name.lower())
    for kind in all_kinds():
        if lowered in (kind.kind.lower(), kind.resource) and (not group or group == (kind.group or "core")):
            return kind
    known = ", ".join(sorted({kind.kind.lower() for kind in all_kinds()}))
    raise LiveError(f"{reference}: not a kind Placer mutates (one of: {known})")


def read_object(api: KubeApi, target: str, namespace: str | None) -> JSONObject:
    """The live object named `KIND/NAME` in `namespace`, as a manifest (what `kubectl get -o yaml` shows)."""
    kind_name, slash, name = target.partition("/")
    if not slash or not name:
        raise LiveError(f"{target}: expected KIND/NAME, e.g. deployment/web")
    kind = resolve_kind(kind_name)
    prefix = "/api/v1" if not kind.group else f"/apis/{kind.group}/{kind.versions[0]}"
    path = f"{prefix}/namespaces/{quote(namespace or DEFAULT_NAMESPACE, safe='')}/{kind.resource}/{quote(name)}"
    try:
        obj: dict[str, Any] = api.get(path)
    except ApiError as error:
        raise LiveError(f"{kind.kind.lower()}/{name} in namespace {namespace or DEFAULT_NAMESPACE}: {error}") from None
    obj.setdefault("kind", kind.kind)
    obj.setdefault("apiVersion", f"{kind.group}/{kind.versions[0]}" if kind.group else "v1")
    return obj
