"""Placer's actions as MutatingAdmissionPolicy mutations: CEL expressions returning the JSON Patch Placer would
send, and the patch operations they share (spread and pod affinity terms: `pod_terms`; a rule's mutations,
condition and applied annotation: `rule_mutations`).

Each expression reads the template as it is when the mutation runs (`variables.placerPod`, at
`variables.placerTemplatePath` in the object) and adds only what is missing, so it is idempotent like the
action (a reinvocation, or a Pod made from a mutated template, gets an empty patch). Parents that do not
exist are created with the value inside them (an `add` below a missing parent fails, which the API server
does not forgive even with failurePolicy Ignore). Atomic fields (`nodeSelector`, the affinity terms) are
written with JSON Patch, which may replace them, never with an apply configuration, which may not.

The values written are those Placer's actions write (`toleration_from`, the requirement, the term, the
constraint), with parameter expressions inlined as CEL (`cel_text.Cel`).
"""

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.actions.metadata import APPLIED_ANNOTATION
from webhook.actions.scheduling import DEFAULT_SCHEDULER
from webhook.actions.tolerations import toleration_from
from webhook.export.cel_text import Cel, bind, literal

T = "variables.placerPod"
"""The pod template (a Pod: the Pod) as the mutation sees it."""


def op(kind: str, pointer: str, value: str | None = None) -> str:
    """CEL for one patch operation: `JSONPatch{op: ..., path: ..., value: ...}`, the type the API server
    declares for a JSONPatch mutation (staging/src/k8s.io/apiserver/pkg/cel/mutation/jsonpatch.go)."""
    fields = [("op", literal(kind)), ("path", pointer)] + ([("value", value)] if value is not None else [])
    return "JSONPatch{" + ", ".join(f"{name}: {text}" for name, text in fields) + "}"


def escape(key: str) -> str:
    """A map key as one JSON pointer token (RFC 6901), escaped here since every key Placer writes is known."""
    return key.replace("~", "~0").replace("/", "~1")


def path(*tokens: str) -> str:
    """CEL for the pointer to `tokens` below the template (`spec`, `nodeSelector`, ...)."""
    return "variables.placerTemplatePath + " + literal("".join("/" + escape(token) for token in tokens))


def field(*tokens: str) -> str:
    """CEL reading `tokens` below the template (each token a plain field name)."""
    return T + "".join(f"[{literal(token)}]" for token in tokens)


def _member(token: str) -> str:
    return token if token.isidentifier() else f"[{literal(token)}]"


def optional_list(*tokens: str) -> str:
    """CEL: the list at `tokens`, or [] when it or a parent is missing."""
    return T + "".join(f".?{_member(token)}" for token in tokens) + ".orValue([])"


def append(tokens: Sequence[str], item: str) -> str:
    """Ops appending `item` to the list at `tokens`, creating the list and the maps above it when missing."""
    branches: list[tuple[str, str]] = []
    for depth in range(1, len(tokens) + 1):
        missing = tokens[:depth]
        value = "[" + item + "]"
        for token in reversed(tokens[depth:]):
            value = "{" + f"{literal(token)}: {value}" + "}"
        branches.append((f"!({_present(missing)})", op("add", path(*missing), value)))
    expression = "[" + op("add", path(*tokens, "-"), item) + "]"
    for condition, operation in reversed(branches):
        expression = f"{condition} ? [{operation}] : ({expression})"
    return expression


def _present(tokens: Sequence[str]) -> str:
    return T + "".join(f".?{_member(token)}" for token in tokens) + ".hasValue()"


def put_entries(tokens: Sequence[str], pairs: Mapping[str, Any], *, override: bool) -> str:
    """Ops setting the `pairs` missing from the map at `tokens` (with `override`, also those that differ),
    creating the map with all of them when it is missing."""
    entries = _entries(tokens, pairs, override=override, guard=None, skip=None)
    create = op("add", path(*tokens), literal(dict(pairs)))
    return f"!({_present(tokens)}) ? [{create}] : ({entries})"


def _entries(tokens: Sequence[str], pairs: Mapping[str, Any], *, override: bool,
             guard: str | None, skip: str | None) -> str:
    """Ops adding each pair the map at `tokens` lacks (`override`: or holds with another value). `guard`: CEL
    that must hold before the map is read (it may be missing); `skip`: CEL list of keys never written."""
    current = T + "".join(f"[{literal(token)}]" for token in tokens)
    entries = []
    for key, value in pairs.items():
        wanted = literal(value)
        held = f"{literal(key)} in {current}"
        test = f"!({guard} && {held})" if guard else f"!({held})"
        if override:
            test = f"({test} || {current}[{literal(key)}] != {wanted})"
        if skip is not None:
            test = f"!({literal(key)} in {skip}) && {test}"
        entries.append(f"({test} ? [{op('add', path(*tokens, key), wanted)}] : [])")
    return " + ".join(entries) or "[]"


def applied_annotation(rule_id: str, policy_rules: Sequence[str]) -> str:
    """Ops adding `policy/rule` to the template's `placer.dev/applied` annotation (creating what is missing),
    the policy's entries kept in rule order after any other policy's."""
    annotations = ("metadata", "annotations")
    current = f"{field(*annotations)}[{literal(APPLIED_ANNOTATION)}]"
    entry = {APPLIED_ANNOTATION: rule_id}
    create_metadata = op("add", path("metadata"), literal({"annotations": entry}))
    create_annotations = op("add", path(*annotations), literal(entry))
    add_entry = op("add", path(*annotations, APPLIED_ANNOTATION), literal(rule_id))
    ours = literal(list(policy_rules))
    ordered = (f"(have.filter(i, !(i in {ours})) + {ours}.filter(i, i in have || i == {literal(rule_id)}))"
               f".join(',')")
    insert = op("replace", path(*annotations, APPLIED_ANNOTATION), ordered)
    return (
        f"!({_present(('metadata',))}) ? [{create_metadata}] : "
        f"!({_present(annotations)}) ? [{create_annotations}] : "
        f"!({literal(APPLIED_ANNOTATION)} in {field(*annotations)}) ? [{add_entry}] : "
        + bind("have", f"{current}.split(',')", f"{literal(rule_id)} in have ? [] : [{insert}]")
    )


def has_applied_annotation() -> str:
    return f"{T}.?metadata.?annotations[?{literal(APPLIED_ANNOTATION)}].hasValue()"


# -- actions ---------------------------------------------------------------------------------------------


def node_selector(params: Mapping[str, Any], override: bool) -> str:
    return put_entries(("spec", "nodeSelector"), params, override=override)


def labels(params: Mapping[str, Any], override: bool) -> str:
    """Labels never touch the keys the workload's selector reads (`variables.placerProtected`)."""
    return _metadata_entries("labels", params, override, skip="variables.placerProtected")


def annotations(params: Mapping[str, Any], override: bool) -> str:
    return _metadata_entries("annotations", params, override, skip=None)


def _metadata_entries(kind: str, params: Mapping[str, Any], override: bool,
                      skip: str | None) -> str:
    """Entries of the template's labels or annotations, key by key (the applied annotation's ops, first in
    the patch, have created `metadata` and `annotations` when they were missing)."""
    tokens = ("metadata", kind)
    body = _entries(tokens, params, override=override, guard=_present(tokens), skip=skip)
    if kind == "annotations":
        return body
    # No labels at all: no selector can be reading them (a controller's template must carry its selector's
    # labels), so the whole map goes in.
    whole = op("add", path("metadata", kind), literal(dict(params)))
    return f"!({_present(('metadata', kind))}) ? [{whole}] : ({body})"


def toleration(params: Mapping[str, Any], override: bool) -> str:
    wanted = toleration_from(params)
    same = (
        f"x.?key.orValue('') == {literal(wanted.get('key', ''))} && "
        f"x.?operator.orValue('Equal') == {literal(wanted['operator'])} && "
        f"x.?value.orValue('') == {literal(wanted.get('value', ''))} && "
        f"x.?effect.orValue('') == {literal(wanted.get('effect', ''))}"
    )
    return (f"{optional_list('spec', 'tolerations')}.exists(x, {same}) ? [] : "
            f"({append(('spec', 'tolerations'), literal(wanted))})")


def _requirement(params: Mapping[str, Any]) -> dict[str, Any]:
    requirement: dict[str, Any] = {"key": params["key"], "operator": params["operator"]}
    values = params.get("values")
    if isinstance(values, Cel):
        requirement["values"] = Cel(bind("given", f"dyn({values.source})", "type(given) == string ? "
                                         "given.split(',').map(v, v.trim()).filter(v, v != '') : given"))
    elif values:
        requirement["values"] = list(values)
    return requirement


def _same_requirement(variable: str, requirement: Mapping[str, Any]) -> str:
    values = literal(requirement.get("values", []))
    existing = f"{variable}.?values.orValue([])"
    return (f"{variable}.?key.orValue('') == {literal(requirement['key'])} && "
            f"{variable}.?operator.orValue('') == {literal(requirement['operator'])} && "
            f"{existing}.all(v, v in {values}) && {values}.all(v, v in {existing})")


def node_affinity(params: Mapping[str, Any], override: bool) -> str:
    requirement = _requirement(params)
    wanted = literal(requirement)
    if params["type"] == "preferred":
        term = literal({"weight": params["weight"], "preference": {"matchExpressions": [Cel(wanted)]}})
        preferred = ("spec", "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
        return (f"{optional_list(*preferred)}.exists(p, p.?preference.?matchExpressions.orValue([])"
                f".exists(e, {_same_requirement('e', requirement)})) ? [] : ({append(preferred, term)})")
    required = ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
                "nodeSelectorTerms")
    terms = optional_list(*required)
    holds = f"t.?matchExpressions.orValue([]).exists(e, {_same_requirement('e', requirement)})"
    extended = (f"{{?'matchFields': t.?matchFields, 'matchExpressions': "
                f"dyn(t.?matchExpressions.orValue([]) + [{wanted}])}}")
    first = literal({"matchExpressions": [Cel(wanted)]})
    return (f"{terms}.size() == 0 ? ({append(required, first)}) : "
            f"{terms}.all(t, {holds}) ? [] : "
            f"[{op('replace', path(*required), f'{terms}.map(t, {holds} ? t : {extended})')}]")


def scheduler_name(params: Mapping[str, Any], override: bool) -> str:
    name = literal(params["schedulerName"])
    current = f"{T}.spec.?schedulerName.orValue({literal(DEFAULT_SCHEDULER)})"
    may = "true" if override else f"{current} == {literal(DEFAULT_SCHEDULER)}"
    return (f"{T}.spec.?schedulerName.orValue('') == {name} || !({may}) ? [] : "
            f"[{op('add', path('spec', 'schedulerName'), name)}]")


def priority_class(params: Mapping[str, Any], override: bool) -> str:
    """Set the class when unset; drop the integer priority and preemption policy the Priority plugin wrote
    on a bare Pod (the API server rejects a Pod whose class and priority disagree)."""
    name = literal(params["priorityClassName"])
    may = "true" if override else f"!has({T}.spec.priorityClassName)"
    drops = " + ".join(
        f"(has({T}.spec.{name_}) ? [{op('remove', path('spec', name_))}] : [])"
        for name_ in ("priority", "preemptionPolicy")
    )
    return (f"{T}.spec.?priorityClassName.orValue('') == {name} || !({may}) ? [] : "
            f"[{op('add', path('spec', 'priorityClassName'), name)}] + {drops}")
