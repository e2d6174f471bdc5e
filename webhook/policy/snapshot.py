"""The immutable set of compiled policies and namespace labels that one admission reads.

Sources build a new snapshot and swap it in with one assignment, so every admission sees either the old
set or the new one, never a mix.
"""

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.actions.spot_share import SPOT_SHARE
from webhook.policy.cel.environment import VARIABLE_NAMES
from webhook.policy.cel.field_reads import FieldTree, merged, prune
from webhook.policy.errors import PolicyError
from webhook.policy.model import Policy
from webhook.policy.namespace_facts import FactsByNamespace, NamespaceFacts
from webhook.policy.observed_memo import ObservedMemo
from webhook.policy.policy_set import KEPT_SETS, PolicySet

ResourcesOfPod = Callable[[Mapping[str, Any], Mapping[str, Any]], Mapping[str, Any]]
"""(pod spec, `resources` as the pod alone says) -> `resources` with what only the cluster knows added: the
devices the pod claims through DRA (`webhook.placement.claims.AdmissionDevices`)."""


NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server writes on every Namespace, always equal to its name, whatever the request said:
kubernetes pkg/registry/core/namespace/strategy.go, `namespaceStrategy.Canonicalize` (and
`SetDefaults_Namespace` in pkg/apis/core/v1/defaults.go); GA since 1.22 (feature gate NamespaceDefaultLabelName,
since removed)."""


def with_name_label(name: str, labels: Mapping[str, str]) -> Mapping[str, str]:
    """`labels` as the API server stores them on Namespace `name`: with `NAMESPACE_NAME_LABEL` set to its name
    (the same mapping when it already is, the usual case for a namespace read from a cluster)."""
    if not name or labels.get(NAMESPACE_NAME_LABEL) == name:
        return labels
    return {**labels, NAMESPACE_NAME_LABEL: name}


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """The Namespace as `namespaceObject` shows it, as in Kubernetes: metadata (name, uid, creationTimestamp,
    labels and annotations, always maps), spec and status. Managed fields and the last-applied annotation
    are left out: no policy needs them and every replica keeps one of these per namespace.

    Its labels always hold `kubernetes.io/metadata.name: <name>`, as every Namespace's do on a cluster: this
    is the one place that holds for namespaces Placer builds itself (a Namespace manifest, `--namespace-labels`,
    a `placer test` suite, a namespace nobody described), so a policy selecting a namespace by its name
    selects it offline too."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    rest: Mapping[str, Any] = field(default_factory=dict)
    """`uid` and `creationTimestamp` (under `metadata`), `spec` and `status`, where known."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", with_name_label(self.name, self.labels))

    def as_cel(self) -> dict[str, Any]:
        metadata = {**self.rest.get("metadata", {}), "name": self.name, "labels": dict(self.labels),
                    "annotations": dict(self.annotations)}
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
        namespace.update((key, value) for key, value in self.rest.items() if key != "metadata")
        return namespace


@dataclass(frozen=True, slots=True)
class UnknownNamespace:
    """A namespace Placer could not learn about in time (not in the cache, and the API server did not answer).

    Policies that select or read the namespace cannot be decided for it: they follow their failurePolicy.
    """

    name: str
    reason: str


class LayeredNamespaces(Mapping[str, NamespaceInfo]):
    """Several sources' namespaces as one mapping, the first layer that has a name winning.

    Layers are looked into, never copied: the cluster's layer reads one namespace from its shard on demand
    (`webhook.policy.state.namespace_shards`), so a snapshot costs the same at 10 and at 10,000 namespaces.
    """

    __slots__ = ("_layers",)

    def __init__(self, layers: Sequence[Mapping[str, NamespaceInfo]]) -> None:
        self._layers = tuple(layers)

    @classmethod
    def of(cls, layers: Sequence[Mapping[str, NamespaceInfo]]) -> Mapping[str, NamespaceInfo]:
        """The fewest layers that answer the same: nested layers opened up, neighbouring plain dicts merged
        into one (an admission's lookup then costs one dict lookup per layer that is not a dict)."""
        flat: list[Mapping[str, NamespaceInfo]] = []
        for layer in layers:
            for part in layer._layers if isinstance(layer, LayeredNamespaces) else (layer,):
                if isinstance(part, dict) and flat and isinstance(flat[-1], dict):
                    flat[-1] = {**part, **flat[-1]}  # the earlier layer wins
                else:
                    flat.append(dict(part) if isinstance(part, dict) else part)
        if len(flat) == 1:
            return flat[0]
        return cls(flat) if flat else {}

    def get(self, name: str, default: Any = None) -> Any:  # Mapping.get would ask every layer twice
        for layer in self._layers:
            found = layer.get(name)
            if found is not None:
                return found
        return default

    def __getitem__(self, name: str) -> NamespaceInfo:
        for layer in self._layers:
            found = layer.get(name)
            if found is not None:
                return found
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for layer in self._layers:
            for name in layer:
                if name not in seen:
                    seen.add(name)
                    yield name

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(frozen=True, slots=True)
class PolicySnapshot:
    policies: tuple[Policy, ...]
    """In evaluation order: priority, then name."""
    namespaces: Mapping[str, NamespaceInfo]
    errors: tuple[PolicyError, ...]
    environment: Any
    """The CEL environment the policies were compiled in; activations are created from it."""
    ready: bool = True
    default_priority_class: str | None = None
    """The cluster's `globalDefault` PriorityClass: the Priority admission plugin writes it into every Pod that
    names none, before webhooks run, so on a Pod it means "unset" to `set-priority-class`."""
    pod_groups_served: bool | None = None
    """Whether the API server serves PodGroups, as the cluster controller last found (None: not known)."""
    native_gang_version: str | None = None
    """The kube-scheduler PodGroup version it serves (`webhook.gang.native`), "" for none, None: not known."""
    job_gangs: bool = False
    """The Job controller keeps a Job's gang from the Job's own `spec.scheduling` (1.37+, feature gate
    WorkloadWithJob): native gang rules write that field on Jobs instead of a PodGroup of Placer's."""
    audited: tuple[Policy, ...] = ()
    """The `enforcement: Audit` policies, in evaluation order: never among `policies`, so nothing the engine
    serves is derived from them (`webhook.admission.audit` evaluates each in its own `audit_view`)."""
    enforces: bool = field(init=False, default=False)
    """Some policy is Enforced: a Pod Placer would pass (made from a template it mutated) is checked again."""
    reads_claims: bool = field(init=False, default=False)
    """Some rule pins pods to their volumes' nodes: a Pod's claims are looked up before its admission."""
    reads_shares: bool = field(init=False, default=False)
    """Some rule decides spot shares: a Pod made from a template Placer mutated still gets its class."""
    observed: Mapping[str, FieldTree] = field(init=False, default_factory=dict, compare=False, repr=False)
    """What any policy's expressions observe of each CEL variable (`field_reads`)."""
    quantities: dict[str, float] = field(init=False, default_factory=dict, compare=False, repr=False)
    """The value of each quantity string the engine read under this snapshot (`pods.resources`, bounded):
    pods ask for the same few (`500m`, `4Gi`)."""
    policy_sets: dict[tuple[str, ...], PolicySet] = field(init=False, default_factory=dict, compare=False, repr=False)
    """What the engine needs of each selection of policies it evaluated under this snapshot (bounded)."""
    namespace_facts: FactsByNamespace = field(init=False, default_factory=FactsByNamespace, compare=False,
                                              repr=False)
    """What the engine worked out from each namespace alone under this snapshot (bounded)."""
    observed_memo: ObservedMemo = field(init=False, default_factory=ObservedMemo, compare=False, repr=False)
    """The outcome of each expression by the observed fields it was evaluated on (bounded)."""
    everything: tuple[Policy, ...] = field(init=False, default=(), compare=False, repr=False)
    """`every_policy` when there are Audit policies (sorted once)."""
    audit_views: dict[str, "PolicySnapshot"] = field(init=False, default_factory=dict, compare=False, repr=False)
    """Per Audit policy, the snapshot that serves it as Advisory beside `policies` (`audit_view`)."""

    def __post_init__(self) -> None:
        reads = any(rule.action.pod_only for policy in self.policies for rule in policy.rules)
        object.__setattr__(self, "reads_claims", reads)
        shares = any(rule.action.name == SPOT_SHARE for policy in self.policies for rule in policy.rules)
        object.__setattr__(self, "reads_shares", shares)
        object.__setattr__(self, "enforces", any(policy.enforced for policy in self.policies))
        if self.audited:
            every = tuple(sorted((*self.policies, *self.audited), key=lambda policy: policy.order_key))
            object.__setattr__(self, "everything", every)
        fields = (program.fields for policy in self.policies for program in policy.programs())
        object.__setattr__(self, "observed", merged(fields, VARIABLE_NAMES))

    @property
    def every_policy(self) -> tuple[Policy, ...]:
        """The served and the audited policies, in evaluation order (for listing, export and reports)."""
        return self.everything if self.audited else self.policies

    def audit_view(self, policy: Policy) -> "PolicySnapshot":
        """The snapshot that would serve if the Audit `policy` were promoted to Advisory: `policies` and it, with
        caches of its own (the served snapshot's memo, namespace facts and policy sets never see it)."""
        view = self.audit_views.get(policy.name)
        if view is None:
            advisory = dataclasses.replace(policy, enforcement="Advisory")
            view = dataclasses.replace(self, policies=tuple(sorted((*self.policies, advisory),
                                                                    key=lambda kept: kept.order_key)), audited=())
            self.audit_views[policy.name] = view
        return view

    def observable(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """The CEL variables cut down to what the policies can observe of them (`field_reads.prune`): the
        runtime converts a variable whole on first use, so this is what it then costs. A variable no policy
        reads is left out (no expression can name it), but `variables`, which the engine binds itself."""
        observed = self.observed
        found: dict[str, Any] = {}
        for name, value in variables.items():
            tree = observed.get(name)
            if tree is not None:
                found[name] = prune(value, tree)
            elif name == "variables":
                found[name] = value
        return found

    def namespace_variable(self, namespace: NamespaceInfo, facts: NamespaceFacts) -> dict[str, Any] | None:
        """`namespaceObject` as `observable` cuts it down, or None when no policy reads it; worked out once per
        namespace (`facts`: the namespace's) and never changed: the engine reads it only through the runtime."""
        tree = self.observed.get("namespaceObject")
        if tree is None:
            return None
        value: dict[str, Any] | None = facts.recall(tree)
        if value is None:
            value = prune(namespace.as_cel(), tree)
            facts.remember(tree, value)
        return value

    def policy_set(self, policies: list[Policy]) -> PolicySet:
        """The selection `policies` (in evaluation order) as the engine evaluates it, worked out once; a selection
        of policies this snapshot does not hold (rules cut down for one request) is worked out each time."""
        key = tuple(policy.name for policy in policies)
        found = self.policy_sets.get(key)
        if found is not None and all(kept is given for kept, given in zip(found.policies, policies, strict=True)):
            return found
        kept = all(any(given is held for held in self.policies) for given in policies)
        found = PolicySet.of(tuple(policies), self.environment, kept=kept)
        if kept:
            if len(self.policy_sets) >= KEPT_SETS:
                self.policy_sets.clear()
            self.policy_sets[key] = found
        return found

    @property
    def reads_resources(self) -> bool:
        """Some policy's expressions read the `resources` variable."""
        return self.observed.get("resources") is not None

    @classmethod
    def build(
        cls,
        policies: Iterable[Policy],
        namespaces: Mapping[str, NamespaceInfo],
        errors: Iterable[PolicyError],
        environment: Any,
        *,
        ready: bool = True,
        default_priority_class: str | None = None,
        pod_groups_served: bool | None = None,
        native_gang_version: str | None = None,
        job_gangs: bool = False,
    ) -> "PolicySnapshot":
        ordered = tuple(sorted(policies, key=lambda policy: policy.order_key))
        served = tuple(policy for policy in ordered if not policy.audited)
        audited = tuple(policy for policy in ordered if policy.audited) if len(served) < len(ordered) else ()
        return cls(served, namespaces, tuple(errors), environment, ready, default_priority_class, pod_groups_served,
                   native_gang_version, job_gangs, audited)

    def namespace(self, name: str) -> NamespaceInfo:
        """The known namespace, or one with no labels (a policy selecting on labels will not match)."""
        return self.namespaces.get(name) or NamespaceInfo(name)


class SnapshotHolder:
    """The current snapshot of one process; replaced whole, read without locks."""

    def __init__(self, snapshot: PolicySnapshot) -> None:
        self.current = snapshot

    def swap(self, snapshot: PolicySnapshot) -> None:
        self.current = snapshot
