"""Placer's MutatingWebhookConfiguration kept to what the serving policies can act on: fewer reviews asked for.

Every review the API server sends costs the request a round trip (about a millisecond at best), however
quickly Placer answers "nothing to do". As Kyverno's webhook controller does with its own configurations
(kyverno/kyverno `pkg/controllers/webhook/controller.go`: the desired webhooks built from the policies and
written over the observed configuration), the controller (the leader, or every replica without an
election) rewrites the `rules` and Placer's `matchConditions` of each entry of the configuration named by
`--webhook-configuration` that sends its reviews to Placer (`/mutate`, the advisory entry; `/enforce`, the
fail-closed one), whenever what the serving policies can act on changes, and looks again every
`RECHECK_SECONDS` (a re-applied manifest brings the full rules back). Both entries are sent the same
resources (namespaces an Enforced policy holds go to the fail-closed entry only, and every policy applies
there):

- no serving policy: no rules; the API server calls Placer for nothing;
- only rules whose action runs on Pods alone (`ActionSpec.pod_only`: pin-to-volume-node, spot-share): Pods;
- otherwise every workload kind of the workload table: to the advisory entry with the operations Placer
  changes (`WorkloadKind.operations`), to the fail-closed entry with CREATE and UPDATE (`ENTRY_OPERATIONS`);
- a Pod its controller made from a template Placer already mutated (`placer.dev/applied` and a controller
  owner reference) is left out by a matchCondition while no rule of any policy runs on such Pods (none is
  pod-only, none is Enforced: `webhook.engine.selection.controller_owned` passes them through then), so
  the pods of a Placer-mutated Deployment cost nothing;
- a workload other than a Pod that a controller owns (a Deployment's ReplicaSet, a CronJob's Job: Placer
  acts on the owner and passes these through, `controller_owned`) is left out while no policy is Enforced
  (an Enforced policy checks what such an object says, whoever wrote its owner reference);
- an UPDATE of a built-in workload that leaves its pod template as it was is left out (Placer passes it
  through: "the update does not change the pod template", `WorkloadKind.template_changed`), so a
  controller's bookkeeping on the object (the Deployment controller's revision annotation) costs nothing.

Everything else of the configuration stays as installed: names, client configuration and CA bundle, the
opt-in namespace and object selectors, failure policies, timeouts, and any matchCondition not named
`placer.dev/...`. matchConditions are written only where the API server has them (GA in Kubernetes 1.30).
Each condition is written so that it cannot fail to evaluate (`has()` before every optional field): a
failing condition would apply the entry's failurePolicy, skipping Placer (Ignore) or refusing the request
(Fail). A rule for an operator resource whose CRD is not installed matches nothing, as in the manifest.

A SchedulingPolicy created after the rules were narrowed is acted on from the moment the controller has
widened them again (the next round, about a second); its status says Ready before that.

Writes: one GET of the configuration, and a PUT carrying its resourceVersion when something changes (a
concurrent change, cert-manager's CA injection say, makes it a 409; the next round tries again). RBAC: get
and update on this one MutatingWebhookConfiguration (`resourceNames`, deploy/base/rbac.yaml).
"""

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlparse

from webhook.actions.registry import action_specs
from webhook.cluster.client.api import ApiError, KubeApi, TransportError
from webhook.policy.model import Policy
from webhook.policy.sources.files import FilePolicySource
from webhook.workloads import WorkloadKind, all_kinds

log = logging.getLogger(__name__)

MUTATING_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
REVIEW_PATH = "/mutate"
ENFORCE_PATH = "/enforce"
CONDITION_PREFIX = "placer.dev/"
PODS_OF_MUTATED_TEMPLATES = CONDITION_PREFIX + "not-a-pod-of-a-mutated-template"
UNCHANGED_TEMPLATES = CONDITION_PREFIX + "not-an-update-leaving-the-template"
OWNED_WORKLOADS = CONDITION_PREFIX + "not-a-workload-of-a-controller"
MATCH_CONDITIONS_SINCE = (1, 30)
"""The Kubernetes version from which webhook matchConditions are GA (feature AdmissionWebhookMatchConditions)."""
RECHECK_SECONDS = 60.0

POD_OF_MUTATED_TEMPLATE = (
    "!(request.resource.group == '' && request.resource.resource == 'pods' && request.subResource == '' "
    "&& has(object.metadata) && has(object.metadata.annotations) "
    "&& 'placer.dev/applied' in object.metadata.annotations "
    "&& has(object.metadata.ownerReferences) "
    "&& object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true))"
)
"""False (not sent) for a Pod carrying the applied annotation with a controller owner reference: exactly the
Pods `webhook.engine.selection.from_mutated_template` recognises."""

WORKLOAD_OF_A_CONTROLLER = (
    "!(request.resource.resource != 'pods' && has(object.metadata) "
    "&& has(object.metadata.ownerReferences) "
    "&& object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true))"
)
"""False (not sent) for a workload other than a Pod that has a controller owner reference (a Deployment's
ReplicaSet, a CronJob's Job, an operator's StatefulSet): `webhook.engine.selection.controller_owned` passes
them through, Placer acts on the owner."""

TEMPLATE_PATHS = {
    ("apps", "deployments"): "spec.template",
    ("apps", "replicasets"): "spec.template",
    ("apps", "statefulsets"): "spec.template",
    ("apps", "daemonsets"): "spec.template",
    ("batch", "jobs"): "spec.template",
    ("batch", "cronjobs"): "spec.jobTemplate.spec.template",
}
"""Where each built-in workload keeps its one pod template (the slots of `webhook.workloads.builtin`;
tests/unit/test_registration.py checks them against the workload table)."""


@dataclass(frozen=True, slots=True)
class Reach:
    """What one serving policy can act on: whether it is Enforced, and the actions its rules take."""

    enforced: bool
    actions: frozenset[str]


def reach_of_document(document: Mapping[str, Any]) -> Reach | None:
    """A serving SchedulingPolicy document's reach (it compiled, so its fields have their types)."""
    spec = document.get("spec")
    if not isinstance(spec, dict):
        return None
    rules = spec.get("rules")
    actions = frozenset(str(rule.get("action")) for rule in rules if isinstance(rule, dict)) if isinstance(
        rules, list) else frozenset[str]()
    return Reach(spec.get("enforcement") == "Enforced", actions)


def reach_of_policy(policy: Policy) -> Reach:
    return Reach(policy.enforced, frozenset(rule.action.name for rule in policy.rules))


@dataclass(frozen=True, slots=True)
class Target:
    """One resource whose writes Placer may be sent: a row of the workload table."""

    group: str
    resource: str
    versions: tuple[str, ...]
    operations: frozenset[str]
    """What the row says Placer changes (`WorkloadKind.operations`): what the advisory entry is sent."""

    @classmethod
    def of(cls, kind: WorkloadKind) -> "Target":
        return cls(kind.group, kind.resource, tuple(kind.versions), kind.operations)


def advisory_operations(target: Target) -> frozenset[str]:
    return target.operations


def enforced_operations(target: Target) -> frozenset[str]:
    """The fail-closed entry is sent UPDATEs of every kind: an update may bring what an Enforced policy refuses
    (a Pod's toleration, a suspended Job's template), which is checked though never changed
    (`webhook.engine.enforced_check`); deploy/base/webhooks.yaml says the same."""
    return target.operations | {"CREATE", "UPDATE"}


ENTRY_OPERATIONS: dict[str, Callable[[Target], frozenset[str]]] = {
    REVIEW_PATH: advisory_operations,
    ENFORCE_PATH: enforced_operations,
}
"""The entries kept, by the path they send reviews to, and the operations each is sent per resource."""


@dataclass(frozen=True, slots=True)
class Registration:
    """What each entry of the configuration that sends reviews to Placer should ask for."""

    targets: tuple[Target, ...]
    skip_pods_of_mutated_templates: bool
    skip_unchanged_templates: bool
    skip_workloads_of_controllers: bool = False

    def rules(self, path: str = REVIEW_PATH) -> list[dict[str, Any]]:
        """The `rules` of the entry sending reviews to `path`: one per API group, versions and operations,
        resources sorted (as deploy/ has them)."""
        operations_of = ENTRY_OPERATIONS[path]
        grouped: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
        for target in self.targets:
            key = (target.group, target.versions, tuple(sorted(operations_of(target))))
            grouped.setdefault(key, []).append(target.resource)
        return [{"apiGroups": [group], "apiVersions": list(versions), "operations": list(operations),
                 "resources": sorted(resources), "scope": "Namespaced"}
                for (group, versions, operations), resources in grouped.items()]

    def conditions(self, path: str = REVIEW_PATH) -> list[dict[str, str]]:
        """Placer's matchConditions for the entry sending reviews to `path` (all must hold for a request to be
        sent)."""
        operations_of = ENTRY_OPERATIONS[path]
        found = []
        if self.skip_pods_of_mutated_templates:
            found.append({"name": PODS_OF_MUTATED_TEMPLATES, "expression": POD_OF_MUTATED_TEMPLATE})
        if self.skip_workloads_of_controllers and any(target.resource != "pods" for target in self.targets):
            found.append({"name": OWNED_WORKLOADS, "expression": WORKLOAD_OF_A_CONTROLLER})
        updated = [(target.group, target.resource) for target in self.targets
                   if (target.group, target.resource) in TEMPLATE_PATHS and "UPDATE" in operations_of(target)]
        if self.skip_unchanged_templates and updated:
            found.append({"name": UNCHANGED_TEMPLATES, "expression": unchanged_template_condition(updated)})
        return found


def registration(reaches: Iterable[Reach], kinds: Sequence[WorkloadKind] | None = None) -> Registration:
    """What the serving policies can act on (see the module docstring)."""
    table = list(kinds) if kinds is not None else all_kinds()
    specs = action_specs()
    reached = list(reaches)
    actions = {action for reach in reached for action in reach.actions}
    pod_only = {action for action in actions if (spec := specs.get(action)) is not None and spec.pod_only}
    if not reached:
        chosen: list[WorkloadKind] = []
    elif actions - pod_only:
        chosen = table
    else:
        chosen = [kind for kind in table if kind.group == "" and kind.kind == "Pod"]
    enforced = any(reach.enforced for reach in reached)
    return Registration(tuple(Target.of(kind) for kind in chosen),
                        skip_pods_of_mutated_templates=bool(chosen) and not pod_only and not enforced,
                        skip_unchanged_templates=bool(chosen),
                        skip_workloads_of_controllers=bool(chosen) and not enforced)


def unchanged_template_condition(resources: Iterable[tuple[str, str]]) -> str:
    """False (not sent) for an UPDATE of one of `resources` whose pod template is as it was."""
    cases = []
    for group, resource in resources:
        path = TEMPLATE_PATHS[(group, resource)]
        new, old = f"object.{path}", f"oldObject.{path}"
        cases.append(f"(request.resource.group == '{group}' && request.resource.resource == '{resource}' "
                     f"&& {_present(new)} && {_present(old)} && {new} == {old})")
    return f"!(request.operation == 'UPDATE' && request.subResource == '' && ({' || '.join(cases)}))"


def _present(path: str) -> str:
    """`has()` of every step of `path` below its root variable, so the comparison cannot fail."""
    root, *steps = path.split(".")
    return " && ".join(f"has({'.'.join([root, *steps[:index + 1]])})" for index in range(len(steps)))


def review_path(webhook: Mapping[str, Any]) -> str | None:
    """The path a webhook entry sends its reviews to (by Service or by URL), when it is one Placer keeps."""
    client = webhook.get("clientConfig")
    if not isinstance(client, dict):
        return None
    service = client.get("service")
    url = client.get("url")
    if isinstance(service, dict):
        path = service.get("path")
    elif isinstance(url, str):
        path = urlparse(url).path
    else:
        return None
    return path if path in ENTRY_OPERATIONS else None


def covered(rules: Any) -> set[tuple[str, str, str, tuple[str, ...], str]]:
    """What a `rules` list asks for, as (group, resource, version, operations, scope): rules that say the
    same grouped differently compare equal."""
    found = set()
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict):
            continue
        operations = tuple(sorted(rule.get("operations") or ()))
        for group in rule.get("apiGroups") or ():
            for resource in rule.get("resources") or ():
                for version in rule.get("apiVersions") or ():
                    found.add((group, resource, version, operations, rule.get("scope") or "*"))
    return found


def updated_configuration(configuration: Mapping[str, Any], wanted: Registration, *,
                          match_conditions: bool) -> dict[str, Any] | None:
    """The configuration with each entry Placer keeps asking for what `wanted` says; None when each does."""
    webhooks = configuration.get("webhooks")
    if not isinstance(webhooks, list):
        return None
    changed = False
    entries = []
    for webhook in webhooks:
        path = review_path(webhook) if isinstance(webhook, dict) else None
        if path is None:
            entries.append(webhook)
            continue
        rules, conditions = wanted.rules(path), wanted.conditions(path)
        entry = dict(webhook)
        if covered(entry.get("rules")) != covered(rules):
            entry["rules"] = rules
            changed = True
        if match_conditions:
            others = [condition for condition in entry.get("matchConditions") or []
                      if not str(condition.get("name", "")).startswith(CONDITION_PREFIX)]
            if entry.get("matchConditions", []) != others + conditions:
                entry["matchConditions"] = others + conditions
                if not entry["matchConditions"]:
                    del entry["matchConditions"]
                changed = True
        entries.append(entry)
    return {**configuration, "webhooks": entries} if changed else None


class WebhookRegistration:
    """Keeps one MutatingWebhookConfiguration's entries that send reviews to Placer to what the serving policies
    can act on."""

    def __init__(self, api: KubeApi, name: str, *, match_conditions: bool, files: FilePolicySource | None = None,
                 recheck_seconds: float = RECHECK_SECONDS, monotonic: Callable[[], float] = time.monotonic) -> None:
        """`files`: the file policies the workers serve too (`--policies`), counted with the cluster's."""
        self._api = api
        self._files = files
        self._recheck = recheck_seconds
        self.name = name
        self._path = f"{MUTATING_PATH}/{quote(name, safe='')}"
        self._match_conditions = match_conditions
        self._monotonic = monotonic
        self._kept: Registration | None = None
        """What the configuration was last seen or made to ask for."""
        self._next_check = 0.0
        self._missing_said = False

    def reconcile(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Bring the configuration in line with what the serving cluster policies (their `documents`) and the
        file policies can act on, when that changed or the recheck is due."""
        reaches = [reach for document in documents if (reach := reach_of_document(document)) is not None]
        if self._files is not None:
            self._files.refresh()
            reaches.extend(reach_of_policy(policy) for policy in self._files.content().policies.values())
        wanted = registration(reaches)
        now = self._monotonic()
        if wanted == self._kept and now < self._next_check:
            return
        self._next_check = now + self._recheck
        try:
            configuration = self._api.get(self._path)
            updated = updated_configuration(configuration, wanted, match_conditions=self._match_conditions)
            if updated is not None:
                self._api.replace(self._path, updated)
                log.info("MutatingWebhookConfiguration %s: %d resources, matchConditions %s", self.name,
                         len(wanted.targets), [condition["name"] for condition in wanted.conditions()]
                         if self._match_conditions else "not served")
        except ApiError as error:
            self._kept = None  # try again next round (a 409: someone else wrote it meanwhile)
            if error.code == 404:
                if not self._missing_said:
                    log.warning("MutatingWebhookConfiguration %s not found: its rules are not kept", self.name)
                    self._missing_said = True
                return
            log.warning("MutatingWebhookConfiguration %s not updated: %s", self.name, error)
            return
        except TransportError as error:
            self._kept = None
            log.warning("MutatingWebhookConfiguration %s not updated: %s", self.name, error)
            return
        self._missing_said = False
        self._kept = wanted


def match_conditions_served(major: int, minor: int) -> bool:
    """Whether an API server of this version takes matchConditions (0.0: not known, then not written)."""
    return (major, minor) >= MATCH_CONDITIONS_SINCE
