"""What every action shares: parameter declarations, the per-rule context, conflict handling.

Parameters are declared, not parsed by hand in each action, so the same declaration validates a policy at
load time (with precise messages) and the values `parameterExpressions` compute at admission time.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.gang.facts import GangFacts
from webhook.pods.pod_share import PodShare
from webhook.pods.volumes import ClaimPlacement
from webhook.support.json_copy import copy_json
from webhook.support.selectors import LabelSelector
from webhook.support.typing import JSONObject

ParamKind = Literal["string", "integer", "enum", "values", "keys", "selector", "tolerations"]
BOOLEAN = ("true", "false")
"""The choices of a yes/no parameter (YAML's true and false arrive as these strings)."""


@dataclass(frozen=True, slots=True)
class Param:
    """One named parameter of an action."""

    name: str
    kind: ParamKind
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    check: Callable[[str], str | None] | None = None
    """Syntax check for string values (and each element of `values`/`keys`), e.g. a qualified name."""


@dataclass(frozen=True, slots=True)
class FreeForm:
    """Actions whose parameters are arbitrary `key: value` pairs (node selector, labels, annotations)."""

    key_check: Callable[[str], str | None]
    value_check: Callable[[str], str | None] | None
    reserved_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conflict:
    """Something the template already has that a rule would set otherwise, or that a rule forbids.

    `message` is the warning an Advisory policy gives. `field` (a Kubernetes field path inside the pod
    template, `spec.nodeSelector[node-pool]`) is set only for what decides where a pod may run: an Enforced
    policy refuses those (`webhook.engine.enforcement`) from `field`, `wanted` and `found`, never from the
    message text. `path` and `member` say where `found` sits in a template, so the engine can tell whether an
    UPDATE introduced it: the value at `path` (or, with `member`, an element of the list there)."""

    message: str
    field: str = ""
    wanted: Any = None
    found: Any = None
    path: tuple[str, ...] = ()
    member: bool = False

    @property
    def refusable(self) -> bool:
        return bool(self.field)

    def __str__(self) -> str:
        return self.message


class ActionSkipped(Exception):
    """The action cannot apply to this template (e.g. no label selector can be derived); a warning."""


@dataclass(slots=True)
class ActionContext:
    """What an action may know about the workload besides its template, and where it reports conflicts."""

    override: bool
    own_pods: Callable[[JSONObject], JSONObject | None] | None
    """How to select the workload's own pods, `{labelSelector, matchLabelKeys?}`, given the template as it is
    now (labels an earlier rule added count, so a second pass over Placer's output derives the same)."""
    protected_labels: frozenset[str]
    """Label keys a controller's selector reads: adding or changing them on the template would break it."""
    template: str = ""
    """The name of the pod template being changed (`driver`, `Worker`...; empty for single-template kinds)."""
    gang: Callable[[], GangFacts] | None = None
    """Workload-wide facts for gang scheduling, computed on first use."""
    conflicts: list[Conflict] = field(default_factory=list)
    workload_marks: dict[tuple[str, str], str | None] | None = None
    """Labels and annotations for the workload object's own metadata, by (labels|annotations, key), None to
    remove one (the controller's marks, `webhook.gang.pod_groups`); None when the object cannot carry them."""
    claims: Mapping[str, ClaimPlacement] | None = None
    """On a Pod, where the data of each claim it mounts lives (`pin-to-volume-node`); None when unknown."""
    volume_outcomes: dict[str, str] = field(default_factory=dict)
    """What `pin-to-volume-node` did per claim (pinned, node-gone, volume-missing...), for metrics; keyed by
    claim, so a second pass over the rules counts nothing twice."""
    default_priority_class: str | None = None
    """On a Pod, the cluster's globalDefault PriorityClass, which the Priority admission plugin wrote into the
    Pod before any webhook ran: `set-priority-class` treats it as unset."""
    placer_tolerations: list[JSONObject] = field(default_factory=list)
    """Tolerations the rules of the selected policies add (`add-toleration`): `restrict-tolerations` always
    lets them pass. Shared by every rule of a request, so a computed one counts once added."""
    share: PodShare | None = None
    """On a Pod at its creation, its workload's spot share (`spot-share`); None on a workload's template."""
    notes: list[str] = field(default_factory=list)
    """What explain should say of a rule that needs no warning (the request's `Mutation.notes`)."""

    def conflict(self, message: str, **placement: Any) -> None:
        """Report a conflict; `placement` (field, wanted, found, path, member) makes it refusable."""
        self.conflicts.append(Conflict(message, **placement))

    def pod_selection(self, template: JSONObject, params: Mapping[str, Any]) -> tuple[JSONObject, list[str]]:
        """The `labelSelector` and `matchLabelKeys` a spread constraint or pod (anti-)affinity term gets.

        What the policy wrote is kept as written: its `labelSelector` comes with its own `matchLabelKeys` or
        none (it may select pods of several workloads, where a revision label means nothing), and its
        `matchLabelKeys`, even `[]`, replace the default. Without either, the workload's own pods of the new
        pod's revision (`webhook.workloads.builtin.REVISION_LABEL_OF_POD_OWNER`). ActionSkipped when no
        selector can be derived.
        """
        explicit = params.get("labelSelector")
        if explicit:
            return explicit, list(params.get("matchLabelKeys") or [])
        term = self.own_pods(template) if self.own_pods is not None else None
        if term is None or not term.get("labelSelector"):
            raise ActionSkipped("no labelSelector given and none can be derived from the workload")
        keys = params["matchLabelKeys"] if "matchLabelKeys" in params else term.get("matchLabelKeys") or []
        return term["labelSelector"], list(keys)

    def keeps_label(self, labels: Mapping[str, Any], key: str, value: Any) -> bool:
        """Whether `key` is a selector label that must stay as it is; reports the conflict if it would change."""
        if key not in self.protected_labels:
            return False
        if labels.get(key) != value:
            self.conflict(f"label {key} is used by the workload's selector, kept")
        return True

    def set_scalar(
        self, container: JSONObject, key: str, value: Any, what: str, *, field: str = "",
        path: tuple[str, ...] = (),
    ) -> bool:
        """Set `container[key]` unless it holds a different value; report the conflict either way.

        Returns whether the container changed. `override: true` replaces the value; without it the existing
        value is kept, so the first writer wins. `field` and `path` (the value's place in the template) make a
        kept value a refusable conflict (see Conflict); a replaced one never is: the rule's value holds.
        """
        current = container.get(key)
        if current is None:
            container[key] = value
            return True
        if current == value:
            return False
        if self.override:
            self.conflict(f"{what} was {_short(current)}, replaced by {_short(value)}")
            container[key] = value
            return True
        self.conflict(f"{what} is {_short(current)}, kept (wanted {_short(value)})",
                      field=field, wanted=value, found=current, path=path)
        return False


Apply = Callable[[JSONObject, Mapping[str, Any], ActionContext], bool]
"""Changes the template in place and returns whether it changed anything."""
CrossCheck = Callable[[Mapping[str, Any]], list[tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """An action: its name, parameters, cross-parameter rules and the function that applies it."""

    name: str
    apply: Apply
    params: tuple[Param, ...] = ()
    free_form: FreeForm | None = None
    cross_check: CrossCheck | None = None
    pod_only: bool = False
    """The action reads what only a Pod has (the claims it mounts): it runs on Pods, even on one created from
    a template Placer already mutated, where every other rule has done its work on the template."""
    own_pods: Literal["never", "keyed-elsewhere", "keyed-by-selector"] = "never"
    """Whether the action falls back to the own-pods selector when no `labelSelector` is given, and if so
    whether what it adds is keyed by that selector: a pod (anti-)affinity term with another selector is
    added again, a spread (keyed by topologyKey) is not. The engine needs this to know when another pass
    over labels an earlier rule added can change what the action writes."""
    per_pod: bool = False
    """What the action writes can depend on which pod this is (its name or its request's uid: gang groups
    named after them) or on cluster state no object carries (live pod counts, volumes): a review such a rule
    may run on is never answered from a sibling Pod's (`webhook.admission.sibling_cache`)."""

    def param(self, name: str) -> Param | None:
        return next((param for param in self.params if param.name == name), None)


MUTABLE_SPEC_FIELDS = ("nodeSelector", "affinity", "tolerations", "topologySpreadConstraints")
"""Container fields of a pod spec that actions change in place; scalars (schedulerName...) are replaced."""


def working_copy(template: JSONObject) -> JSONObject:
    """A copy of a pod template that actions may change without touching the original.

    Only what actions write is copied: metadata labels and annotations, and the spec fields listed in
    MUTABLE_SPEC_FIELDS. Containers and volumes, most of an object's size, stay shared, which keeps an
    admission cheap and lets the diff skip them by identity. An action that writes anywhere else must add
    that field here (the property tests check that the request object is never modified).
    """
    copied = dict(template)
    metadata = template.get("metadata")
    if isinstance(metadata, dict):
        copied["metadata"] = copied_metadata = dict(metadata)
        for key in ("labels", "annotations"):
            value = metadata.get(key)
            if isinstance(value, dict):
                copied_metadata[key] = dict(value)
    spec = template.get("spec")
    if isinstance(spec, dict):
        copied["spec"] = copied_spec = dict(spec)
        for key in MUTABLE_SPEC_FIELDS:
            if key in spec:
                copied_spec[key] = copy_json(spec[key])
    return copied


def child_map(parent: JSONObject, *path: str) -> JSONObject | None:
    """The map at `path` below `parent`, or None when any step is missing or not a map. Creates nothing."""
    node: Any = parent
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, dict) else None


def ensure_map(parent: JSONObject, *path: str) -> JSONObject:
    """The map at `path`, creating missing (or null) maps on the way: the patch must create parents."""
    node = parent
    for key in path:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    return node


def ensure_list(parent: JSONObject, *path: str) -> list[Any]:
    """The list at `path`, creating it (and its parent maps) when missing or null."""
    holder = ensure_map(parent, *path[:-1])
    items = holder.get(path[-1])
    if not isinstance(items, list):
        items = []
        holder[path[-1]] = items
    return items


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 24 else text[:21] + "...'"


def selector_matches(selector: Any, labels: Any) -> bool:
    """Whether a raw, non-empty label selector selects a pod with these labels (recognises own-pod terms)."""
    parsed = LabelSelector.from_object(selector)
    return parsed is not None and not parsed.empty and isinstance(labels, dict) and parsed.matches(labels)


def selector_keys(selector: JSONObject) -> set[str]:
    """Label keys a selector reads: kube-apiserver refuses a key in both it and `matchLabelKeys`
    (pkg/apis/core/validation/validation.go, validateMatchLabelKeysAndMismatchLabelKeys)."""
    keys = set(selector.get("matchLabels") or {})
    keys.update(item["key"] for item in selector.get("matchExpressions") or [] if isinstance(item, dict))
    return keys
