"""Every field a rule reads exists: the load-time check of the paths an expression selects.

A condition over a field no object can have never matches, silently (a missing key reads as false), so a
typo such as `pod.metadata.lables` would make a policy that loads, reports Ready and does nothing. Like
Kubernetes' own admission policies, whose expressions are type-checked against the OpenAPI schemas of the
kinds they match (staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/validating/typechecking.go,
TypeChecker.CheckExpression), each path an expression selects (`field_paths`) is looked up in the schema of
its variable (`variable_shapes`) for the target Kubernetes version (`versions`, `schemas`):

- a path none of the variable's schemas has is an error at its position, with the closest name that is
  there (`did you mean labels?`), or with the version that first has it when only a newer one does;
- `object` and `oldObject` may be any kind Placer admits: a path is fine when one of them has it
  (`has(object.spec.replicas)`), and a kind whose schema is unknown accepts anything below `metadata`;
- maps (labels, annotations, nodeSelector, resource lists: `additionalProperties`) and
  `x-kubernetes-preserve-unknown-fields` accept any key.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from webhook.policy.cel.checked_ast import AstError
from webhook.policy.cel.environment import Program
from webhook.policy.fields.field_paths import Path, selections
from webhook.policy.fields.schemas import (
    ANY_INDEX,
    EACH,
    Alternative,
    KindKey,
    Refusal,
    Schema,
    SchemaCatalog,
    SchemaSet,
    step,
)
from webhook.policy.fields.type_check import TypeCheck
from webhook.policy.fields.variable_shapes import roots
from webhook.policy.fields.versions import DEFAULT, newer_than
from webhook.support.suggestions import closest, listed
from webhook.workloads import all_kinds

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CHECKED = frozenset({"object", "oldObject", "request", "namespaceObject", "workload", "pod", "resources"})


@dataclass(frozen=True, slots=True)
class _Miss:
    index: int
    """The step of the path that none of the schemas has."""
    refusal: Refusal


class FieldChecks:
    """The schemas a policy's field paths are checked against: those of `version` (published, or the
    cluster's own when `cluster` is given), with operator kinds from CRD files (`crds`). With a cluster,
    `served` is the (group, version) pairs it serves: a kind of any other is never admitted there."""

    def __init__(
        self,
        version: str = DEFAULT,
        *,
        catalog: SchemaCatalog | None = None,
        cluster: SchemaSet | None = None,
        crds: Mapping[KindKey, Schema] | None = None,
        served: frozenset[tuple[str, str]] | None = None,
        enabled: bool = True,
    ) -> None:
        self.version = version
        self.catalog = catalog if catalog is not None else SchemaCatalog()
        self.cluster = cluster
        self.crds = dict(crds or {})
        self.served = served
        self.enabled = enabled
        self._roots: dict[str, dict[str, list[tuple[str, Alternative]]]] = {}
        self._sets: dict[str, SchemaSet] = {}
        self._types: TypeCheck | None = None

    def types(self) -> TypeCheck | None:
        """The type check of the target's expressions (`type_check`), built on first use; None when the
        checks are off."""
        if not self.enabled:
            return None
        if self._types is None:
            self._types = TypeCheck(self.schemas(self.version), self._roots_of(self.version))
        return self._types

    def schemas(self, version: str) -> SchemaSet:
        """The target's schemas, or another version's: published, with the kinds only the cluster knows
        (its CRDs), so that "exists from" compares the same kinds."""
        if self.cluster is None:
            return self.catalog.published(version)
        if version == self.version:
            return self.cluster
        found = self._sets.get(version)
        if found is None:
            published = self.catalog.published(version)
            found = self._sets[version] = published.with_kinds(
                {key: schema for key, schema in self.cluster.kinds.items() if key not in published.kinds})
        return found

    def _roots_of(self, version: str) -> dict[str, list[tuple[str, Alternative]]]:
        found = self._roots.get(version)
        if found is None:
            kinds = [(kind.group, kind.kind, kind.versions) for kind in all_kinds()]
            found = self._roots[version] = roots(self.schemas(version), kinds, self.crds, self.served)
        return found

    def problems(self, program: Program) -> list[str]:
        """One message per path of `program` that no schema of its variable has, `<input>:line:column: ...`."""
        if not self.enabled or program.tree is None:
            return []
        try:
            found = selections(program.tree, _CHECKED)
        except AstError:
            return []
        messages: list[str] = []
        reported: set[Path] = set()
        for selection in found:
            miss = self._miss(self.version, selection.path, selection.kinds)
            if miss is None:
                continue
            failing = selection.path[:miss.index + 1]
            if failing in reported:
                continue
            reported.add(failing)
            where = _position(program.compiled_text, program.offsets.get(selection.node))
            messages.append(f"{where}: {self._message(failing, miss, selection.kinds)}")
        return messages

    def _labelled(self, version: str, variable: str, kinds: frozenset[str] | None) -> list[tuple[str, Alternative]]:
        """The schemas `variable` may have, only those of `kinds` for the object (a guard narrowed them)."""
        found = self._roots_of(version).get(variable, [])
        if kinds is None or variable not in ("object", "oldObject"):
            return found
        return [(label, schema) for label, schema in found if label in kinds]

    def _miss(self, version: str, path: Path, kinds: frozenset[str] | None = None) -> _Miss | None:
        schemas = self.schemas(version)
        alternatives = [schema for _, schema in self._labelled(version, path[0], kinds)]
        if not alternatives:
            return None
        for index in range(1, len(path)):
            alternatives, refusal = step(schemas, alternatives, path[index])
            if not alternatives:
                return _Miss(index, refusal)
            if all(alternative is None for alternative in alternatives):
                return None
        return None

    def _message(self, path: Path, miss: _Miss, kinds: frozenset[str] | None) -> str:
        shown = f"`{render(path)}`"
        for newer in newer_than(self.version):
            if self._miss(newer, path, kinds) is None:
                return f"{shown} exists from Kubernetes {newer}; the target is {self.version}"
        refusal = miss.refusal
        if refusal.not_an_object is not None:
            parent = f"`{render(path[:-1])}`"
            if refusal.not_an_object == "a list":
                return (f"{shown}: {parent} is a list, with no fields; test its elements "
                        f"(e.g. `{render(path[:-1])}.exists(x, x.{path[-1]} ...)`)")
            return f"{shown}: {parent} is {refusal.not_an_object}, with no fields"
        message = f"{shown}: no such field"
        if path[0] in ("object", "oldObject"):
            seen = sorted({label for label, _ in self._labelled(self.version, path[0], kinds)})
            message += (f" in {' or '.join(seen)}" if kinds is not None
                        else f" in any of the {len(seen)} kinds a policy sees")
        close = closest(path[-1], refusal.known)
        if close is not None:
            return f"{message}; did you mean `{close}`?"
        if refusal.known:
            return f"{message}; known: {listed(sorted(refusal.known))}"
        return message


def render(path: Path) -> str:
    """A path as CEL would select it: `pod.spec.containers[*].image`, `resources.limits['nvidia.com/gpu']`."""
    text = path[0]
    for key in path[1:]:
        if key in (EACH, ANY_INDEX):
            text += key
        elif _IDENTIFIER.match(key):
            text += f".{key}"
        else:
            text += f"[{key!r}]"
    return text


def _position(text: str, offset: int | None) -> str:
    """`<input>:line:column` of the selected name (past the `.` or `.?` the parser points at)."""
    if offset is None or offset > len(text):
        return "<input>"
    if text.startswith("(", offset):  # has(x.f)
        offset += 1
    elif text.startswith(".?", offset):
        offset += 2
    elif text.startswith(".", offset):
        offset += 1
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"<input>:{line}:{column}"
