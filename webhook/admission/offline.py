"""`placer apply` and `placer lint`: the engine run on manifests from disk, with no cluster.

`apply` builds the AdmissionReview the API server would send for each manifest, runs the same engine as
the webhook, and applies the resulting patch with an independent JSON Patch implementation, so what it
shows is what a real create would store.
"""

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from webhook.admission.audit import mutate_audited
from webhook.admission.explain_lines import audit_lines, trace_line
from webhook.admission.request_options import RequestOptions
from webhook.admission.review import decode_json
from webhook.engine.mutate import NO_POLICY, Mutation
from webhook.engine.request import AdmissionRequest
from webhook.gang.native import NOT_SERVED, served_from
from webhook.placement.claims import ClaimLookup
from webhook.placement.node_fit import Nodes, node_fit
from webhook.placement.share_counts import CountedShares
from webhook.pods.dra import CLAIM_KIND, CLASS_KIND, TEMPLATE_KIND, class_entry, device_entry, is_dra_api_version
from webhook.pods.volumes import claim_entry, volume_entry
from webhook.policy.compiler import PolicyCompiler
from webhook.policy.snapshot import NAMESPACE_NAME_LABEL, NamespaceInfo, PolicySnapshot
from webhook.policy.sources.documents import (
    ManifestError,
    expand_lists,
    global_default_class_from,
    is_policy,
    namespace_from,
    read_documents,
)
from webhook.policy.sources.files import FilePolicySource
from webhook.support.typing import JSONObject, as_map
from webhook.workloads import controller_reference, default_workload_table

DEFAULT_NAMESPACE = "default"


@dataclass(slots=True)
class ManifestResult:
    origin: str
    original: JSONObject
    mutated: JSONObject
    mutation: Mutation
    namespace: NamespaceInfo

    @property
    def title(self) -> str:
        metadata = self.original.get("metadata") or {}
        name = metadata.get("name") or (str(metadata.get("generateName") or "") + "*")
        return f"{self.original.get('kind')} {self.namespace.name}/{name}"


@dataclass(slots=True)
class ApplyReport:
    snapshot: PolicySnapshot
    results: list[ManifestResult] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    rule_errors: list[str] = field(default_factory=list)
    """Rules that error on a manifest (`<object>: rule <policy>/<rule> errors: ...`): the command fails."""
    warnings: list[str] = field(default_factory=list)
    nodes: Sequence[tuple[str, Mapping[str, Any]]] | None = None
    """The cluster's nodes (name, facts), when known: `-o explain` says which can host each template's pods."""


def load_policies(paths: Sequence[str], *, required: bool, compiler: PolicyCompiler | None = None) -> PolicySnapshot:
    """The policies of `paths`, compiled by `compiler` (its field checks: the target version's schemas;
    default: the newest supported version's). A target without a PodGroup API (before 1.36) serves no native
    gang: its rules then change nothing, as the webhook's do on such a cluster."""
    compiler = compiler or PolicyCompiler()
    source = FilePolicySource(paths, compiler=compiler, required=paths if required else ())
    source.refresh()
    snapshot = source.snapshot()
    if not served_from(compiler.fields.version):
        snapshot = dataclasses.replace(snapshot, native_gang_version=NOT_SERVED)
    return snapshot


def parse_labels(text: str) -> dict[str, str]:
    """`k=v,k2=v2` as a map; ValueError for a pair without `=`."""
    labels: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ValueError(f"{pair!r} is not key=value")
        labels[key.strip()] = value.strip()
    return labels


NamespaceReader = Callable[[Iterable[str]], Mapping[str, NamespaceInfo]]


def apply_manifests(
    *,
    policy_paths: Sequence[str],
    manifest_paths: Sequence[str],
    namespace_labels: Mapping[str, str],
    operation: str = "CREATE",
    snapshot: PolicySnapshot | None = None,
    objects: Sequence[tuple[str, JSONObject]] = (),
    read_namespaces: NamespaceReader | None = None,
    default_namespace: str = DEFAULT_NAMESPACE,
    nodes: Sequence[tuple[str, Mapping[str, Any]]] | None = None,
    compiler: PolicyCompiler | None = None,
    request_options: RequestOptions | None = None,
) -> ApplyReport:
    """Run the engine on manifests (files, and `objects` as (origin, object)) with the policies of
    `policy_paths`, or of `snapshot` (the cluster's) when given. `read_namespaces` supplies the namespaces
    the manifests are in (the cluster's); Namespace manifests among the files take precedence. `request_options`:
    who sends each request, what an UPDATE replaces, the exemption key (`RequestOptions`)."""
    options = request_options or RequestOptions()
    if snapshot is None:
        snapshot = load_policies(policy_paths, required=True, compiler=compiler)
    report = ApplyReport(snapshot, problems=[str(error) for error in snapshot.errors], nodes=nodes)
    manifests: list[tuple[str, JSONObject]] = list(objects)
    namespaces = dict(snapshot.namespaces)
    declared: dict[str, NamespaceInfo] = {}
    default_class = snapshot.default_priority_class
    for path in manifest_paths:
        try:
            documents = list(expand_lists(read_documents(Path(path).read_text(encoding="utf-8"))))
        except (OSError, UnicodeDecodeError, ManifestError) as error:
            report.problems.append(f"{path}: {error}")
            continue
        for document in documents:
            namespace = namespace_from(document.content)
            default_class = global_default_class_from(document.content) or default_class
            if namespace is not None:
                declared[namespace.name] = namespace
            elif global_default_class_from(document.content) is not None:
                continue
            elif isinstance(document.content, dict) and not is_policy(document.content):
                manifests.append((f"{path}:{document.line}", _as_json(document.content)))
    manifests, declared_volumes = _split_volumes(manifests, default_namespace)
    claims = ClaimLookup(declared_volumes, _KnownNodes(list(nodes)) if nodes else None)
    if read_namespaces is not None:
        wanted = (str(as_map(obj.get("metadata")).get("namespace") or default_namespace) for _, obj in manifests)
        namespaces.update(read_namespaces([name for name in wanted if name not in declared]))
    namespaces.update(declared)
    snapshot = dataclasses.replace(snapshot, namespaces=namespaces, default_priority_class=default_class)
    report.snapshot = snapshot
    workloads = default_workload_table()
    shares = CountedShares()  # each Pod admitted counts, as if created, for the next ones of its workload
    seals = options.seals(lambda: [*(obj for _, obj in manifests), *(result.mutated for result in report.results)])
    for index, (origin, obj) in enumerate(manifests):
        metadata = as_map(obj.get("metadata"))
        namespace = snapshot.namespace(str(metadata.get("namespace") or default_namespace))
        if namespace_labels:
            namespace = dataclasses.replace(namespace, labels={**namespace.labels, **namespace_labels})
        request = _request_for(obj, namespace.name, operation, index, options)
        serving = dataclasses.replace(snapshot, namespaces={**namespaces, namespace.name: namespace})
        devices = claims.devices_for(request, snapshot, workloads)
        mutation = mutate_audited(request, serving, workloads, claims=claims.for_admission(request, snapshot),
                                  devices=devices, ledger=shares, seals=seals)
        _count_pod(shares, request, mutation)
        if devices is not None:  # a claim Placer does not know: a warning, and a note for explain
            mutation.warnings.extend(devices.notes)
            mutation.notes.extend(devices.notes)
        mutated = jsonpatch.apply_patch(obj, mutation.patch) if mutation.patch else obj
        result = ManifestResult(origin, obj, mutated, mutation, namespace)
        report.results.append(result)
        report.warnings.extend(f"{result.title}: placer: {warning}" for warning in mutation.warnings)
        if mutation.denial:
            report.problems.append(f"{result.title}: denied: {mutation.denial}")
        # A rule that errors is a policy that does not work on this object, whatever failurePolicy lets through.
        report.rule_errors.extend(f"{result.title}: {message}" for message in rule_errors(mutation))
    return report


def rule_errors(mutation: Mutation) -> list[str]:
    """Each rule's error on an object, as `placer apply` and `placer test` report it."""
    traces = [*mutation.traces, *(trace for record in mutation.audits for trace in record.traces)]
    return [f"rule {trace.policy}/{trace.rule} errors" + (f" (template {trace.template})" if trace.template else "")
            + f": {trace.detail}" for trace in traces if trace.outcome == "error"]


def _count_pod(shares: CountedShares, request: AdmissionRequest, mutation: Mutation) -> None:
    """Count the Pod as created with the class it got (or came with), when it belongs to a workload."""
    owner = controller_reference(request.object or {})
    uid = owner.get("uid") if owner is not None else None
    if mutation.share is not None and isinstance(uid, str) and uid and not mutation.denial:
        shares.admitted(request.namespace or DEFAULT_NAMESPACE, uid, mutation.share.capacity_class)


class _DeclaredVolumes:
    """PersistentVolumeClaims and PersistentVolumes among the manifests: what `pin-to-volume-node` reads of
    the cluster, offline (the claims a Pod mounts and the nodes their volumes are on); and the DRA
    ResourceClaimTemplates, ResourceClaims and DeviceClasses, whose devices complete `resources`
    (`webhook.pods.dra`)."""

    def __init__(self) -> None:
        self.claims: dict[str, JSONObject] = {}
        self.volumes: dict[str, JSONObject] = {}
        self.device_claims: dict[tuple[str, str], JSONObject] = {}
        """By (kind, namespace/name)."""

    def devices_known(self) -> bool:
        return True  # offline, the manifests are all Placer knows: a template not among them is unknown

    def claim_template(self, namespace: str, name: str) -> JSONObject | None:
        return self.device_claims.get((TEMPLATE_KIND, f"{namespace}/{name}"))

    def resource_claim(self, namespace: str, name: str) -> JSONObject | None:
        return self.device_claims.get((CLAIM_KIND, f"{namespace}/{name}"))

    def device_class(self, name: str) -> JSONObject | None:
        return self.device_claims.get((CLASS_KIND, name))

    def known(self) -> bool:
        return bool(self.claims or self.volumes)

    def claim(self, namespace: str, name: str) -> JSONObject | None:
        return self.claims.get(f"{namespace}/{name}")

    def volume(self, name: str) -> JSONObject | None:
        return self.volumes.get(name)


@dataclass(frozen=True, slots=True)
class _KnownNodes:
    nodes: Nodes
    version: int = 0

    def current(self) -> Nodes:
        return self.nodes


def _split_volumes(
    manifests: list[tuple[str, JSONObject]], default_namespace: str
) -> tuple[list[tuple[str, JSONObject]], _DeclaredVolumes]:
    """The manifests to admit, and the claims and volumes among them (facts about the cluster, not admitted)."""
    volumes = _DeclaredVolumes()
    kept = []
    for origin, obj in manifests:
        metadata = as_map(obj.get("metadata"))
        name = str(metadata.get("name") or "")
        if obj.get("kind") == "PersistentVolumeClaim" and obj.get("apiVersion") == "v1":
            volumes.claims[f"{metadata.get('namespace') or default_namespace}/{name}"] = claim_entry(obj)
        elif obj.get("kind") == "PersistentVolume" and obj.get("apiVersion") == "v1":
            volumes.volumes[name] = volume_entry(obj)
        elif obj.get("kind") in (TEMPLATE_KIND, CLAIM_KIND) and is_dra_api_version(obj.get("apiVersion")):
            key = f"{metadata.get('namespace') or default_namespace}/{name}"
            volumes.device_claims[(str(obj["kind"]), key)] = device_entry(obj, str(obj["kind"]))
        elif obj.get("kind") == CLASS_KIND and is_dra_api_version(obj.get("apiVersion")):
            volumes.device_claims[(CLASS_KIND, name)] = class_entry(obj)
        else:
            kept.append((origin, obj))
    return kept, volumes


def render(report: ApplyReport, output: str) -> str:
    if output == "yaml":
        return yaml.safe_dump_all([r.mutated for r in report.results], sort_keys=False, default_flow_style=False)
    if output == "json":
        items = [r.mutated for r in report.results]
        payload: Any = items[0] if len(items) == 1 else {"apiVersion": "v1", "kind": "List", "items": items}
        return json.dumps(payload, indent=2) + "\n"
    if output == "patch":
        patches = [{"object": r.title, "source": r.origin, "patch": r.mutation.patch} for r in report.results]
        return json.dumps(patches, indent=2) + "\n"
    return "".join(_explain(report.snapshot, result, report.nodes) for result in report.results)


def _explain(
    snapshot: PolicySnapshot, result: ManifestResult, nodes: Sequence[tuple[str, Mapping[str, Any]]] | None
) -> str:
    lines = [f"{result.title} ({result.origin})"]
    mutation = result.mutation
    if mutation.passed_through and mutation.audits:  # the served policies'; the Audit policies' records follow
        reason = mutation.passed_through
        lines.append("  not mutated: " + ("only Audit policies select this namespace" if reason == NO_POLICY
                                          else reason))
    elif mutation.passed_through:
        lines.append(f"  not evaluated: {mutation.passed_through}")
    lines.extend(f"  note: {note}" for note in mutation.notes)
    by_policy: dict[str, list[str]] = {}
    for trace in mutation.traces:
        by_policy.setdefault(trace.policy, []).append(trace_line(trace))
    for record in mutation.audits:
        by_policy.setdefault(record.policy, []).extend(audit_lines(record))
    audited = {record.policy for record in mutation.audits}
    for policy in snapshot.every_policy:
        if mutation.passed_through and policy.name not in audited:
            continue
        if not policy.applies_to_namespace(result.namespace.labels):
            lines.append(f"  policy {policy.name}: namespaceSelector does not select {result.namespace.name}")
        elif policy.name in by_policy:
            lines.append(
                f"  policy {policy.name} (priority {policy.priority}, failurePolicy {policy.failure_policy}"
                + (f", {policy.enforcement})" if policy.enforcement != "Advisory" else ")")
            )
            lines.extend(by_policy[policy.name])
    if mutation.denial:
        lines.append(f"  would be refused: {mutation.denial}" if mutation.refused else f"  DENIED: {mutation.denial}")
    if _unselected_for_want_of_labels(snapshot, result.namespace):
        lines.append(
            f"  hint: namespace {result.namespace.name} has no labels here; give them with "
            "--namespace-labels k=v,... (or a Namespace manifest among the -f files)"
        )
    lines.append(f"  patch: {len(mutation.patch)} operation(s)")
    if nodes is not None:
        lines.extend(_fit_lines(result.mutated, nodes))
    return "\n".join(lines) + "\n\n"


def _unselected_for_want_of_labels(snapshot: PolicySnapshot, namespace: NamespaceInfo) -> bool:
    """A namespaceSelector left a policy out and the namespace has no labels of its own: the usual reason is
    that the user did not say what they are (offline, labels come only from manifests or the flag)."""
    own = {key for key in namespace.labels if key != NAMESPACE_NAME_LABEL}
    return not own and any(not policy.applies_to_namespace(namespace.labels) for policy in snapshot.every_policy)


def _fit_lines(obj: JSONObject, nodes: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Per pod template of the mutated object, which of the cluster's nodes its pods could land on."""
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    kind = default_workload_table().lookup(group, str(obj.get("kind") or ""))
    if kind is None:
        return []
    lines = []
    for slot in kind.templates(obj):
        raw = slot.read(obj)
        if raw is None:
            continue
        spec = as_map(slot.view(obj, raw).get("spec"))
        where = f" [{slot.name}]" if slot.name else ""
        lines.append(f"  nodes{where}: {node_fit(spec, nodes).describe()}")
    return lines


def _request_for(obj: JSONObject, namespace: str, operation: str, index: int,
                 options: RequestOptions) -> AdmissionRequest:
    api_version = str(obj.get("apiVersion") or "")
    group, _, version = api_version.rpartition("/")
    kind = str(obj.get("kind") or "")
    metadata = as_map(obj.get("metadata"))
    return AdmissionRequest(
        api_version="admission.k8s.io/v1",
        uid=f"placer-apply-{index}",
        group=group,
        version=version,
        kind=kind,
        resource={"group": group, "version": version, "resource": kind.lower() + "s"},
        sub_resource="",
        name=str(metadata.get("name") or ""),
        namespace=namespace,
        operation="UPDATE" if operation == "UPDATE" else "CREATE",
        user_info=options.user_info,
        dry_run=True,
        object=obj,
        old_object=options.old_for(obj, namespace) if operation == "UPDATE" else None,
    )


def _as_json(content: Any) -> JSONObject:
    """YAML values as the API server would send them: JSON types only, integers within int64."""
    decoded = decode_json(json.dumps(content, default=str).encode())
    return decoded if isinstance(decoded, dict) else {}
