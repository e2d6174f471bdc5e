"""Type-checking a policy's expressions with the declared type of every variable, when the policy loads.

The evaluation environment declares `object` as `dyn` and Placer's other variables as maps of `dyn`, so an
expression type-checks against objects of any shape: `workload.replicas >= '2'` (an int against a string)
or `condition: workload.replicas` (not a bool) would load, report Ready, and then fail on every admission.
This check compiles each expression once more, in an environment where each variable has the type its
schema declares (`message_types`): Placer's own variables (`variable_shapes`), the target's Namespace, and
`object` / `oldObject` as each kind Placer admits, one environment per kind. Evaluation is unchanged.

What is refused, and why nothing valid is:
- An error found with `object` still `dyn` is an error whatever the kind: a declared type only narrows.
- Otherwise, when the expression reads `object` or `oldObject`, the kinds are tried in turn, and the
  expression passes as soon as one kind type-checks it cleanly. A kind that lacks a field the expression
  selects says nothing either way: fields are the field checks' (`field_check`) to judge, across all kinds,
  and a field of another kind is fine in `object.kind == 'Job' && object.spec.parallelism > 1 || ...`. The
  expression is refused only when no kind passes and some kind with all its fields refuses it, with that
  kind's message (`object.spec.replicas > '2'` is refused as a Deployment's int against a string).
- What a schema leaves open stays `dyn` (`message_types`), and so does a kind whose schema is unknown: then
  `object` may be anything, and nothing that reads it is refused.
- Kubernetes' environment orders numbers across int, uint and double (`cel.CrossTypeNumericComparisons`,
  staging/src/k8s.io/apiserver/pkg/cel/environment/base.go): so does this one. Equality across types is
  refused by both checkers (`workload.replicas == 2.0`, a string field `== null`), as are arithmetic across
  types and `size()` of an object.

The check reads Kubernetes' type-checker as its bound: an expression it refuses is one that Kubernetes'
own compiler (staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/compile.go, with `object` declared as
the kind's schema, as validating/typechecking.go `TypeChecker` declares it) refuses too (docs/cel.md, "Type
errors", says how that was measured).
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.environment import new_environment
from webhook.policy.cel.libraries.leaks import LeakAccount
from webhook.policy.cel.libraries.messages import Messages
from webhook.policy.fields.message_types import PACKAGE, STRUCT_FILE, MessageBuilder
from webhook.policy.fields.schemas import Schema, SchemaSet

Labelled = Sequence[tuple[str, Schema | None]]
Expectation = Callable[[str], str | None]
"""Given an expression's checked result type (`bool`, `int`, `list(dyn)`...), why it cannot be used there;
None when it can."""

_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")
_FIELD_ERRORS = ("undefined field", "'*error*'")
"""cel-cpp's message for a field the type lacks, and for what follows from it: the field checks' to judge."""
_MESSAGE = re.escape(PACKAGE) + r"\.\w+"
_OBJECT_AS_MAP = re.compile(
    r"found no matching overload for '_\[\??_\]' applied to '\(" + _MESSAGE + r", string\)'"
    r"|found no matching overload for '@in' applied to '\(string, " + _MESSAGE + r"\)'"
    r"|expression of type '" + _MESSAGE + r"' cannot be the range of a comprehension")
"""An object used as a map of its fields: `object.metadata['labels']`, `x[?'f']`, `'nodeSelector' in pod.spec`,
`pod.spec.exists(k, ...)`. Placer's values are maps, where this works, and Kubernetes' compiler (its `object`
being `dyn`) takes it: such a use is left to the evaluation."""
_OBJECTS = ("object", "oldObject")
_READS_OBJECT = re.compile(r"\b(?:object|oldObject)\b")
_ORDERING = (("_<_", "less"), ("_<=_", "less_equals"), ("_>_", "greater"), ("_>=_", "greater_equals"))
_NUMBERS = (("int64", cel.Type.INT), ("uint64", cel.Type.UINT), ("double", cel.Type.DOUBLE))
_REMEMBERED = 4096
"""Checks remembered per target (the same condition in many policies is checked once)."""


@dataclass(frozen=True, slots=True)
class TypeProblem:
    """One type error: where in the checked text (line and column from 1, in code points; 0 for the whole
    expression, as for its result type), and what."""

    line: int
    column: int
    message: str


def cross_numeric_ordering() -> Any:
    """`<`, `<=`, `>`, `>=` across int, uint and double, as Kubernetes' environment declares them (cel-go
    `CrossTypeNumericComparisons`), with the CEL standard's overload ids (`less_int64_double`, ...): the
    checker of cel-expr-python declares only same-type orderings (its runtime has all of them)."""
    declarations = []
    for function, stem in _ORDERING:
        overloads = [cel.Overload(f"{stem}_{left}_{right}", cel.Type.BOOL, [left_type, right_type])
                     for left, left_type in _NUMBERS for right, right_type in _NUMBERS if left != right]
        declarations.append(cel.FunctionDecl(function, overloads))
    return cel.CelExtension("cross_numeric_ordering", declarations)


@dataclass(frozen=True, slots=True)
class _Outcome:
    errors: tuple[TypeProblem, ...]
    """Type errors, field errors left out."""
    fields_missing: bool
    """The type lacks a field the expression selects."""


class TypeCheck:
    """The typed environments of one target: one with `object` dynamic, one per kind `object` may be, each
    built on first use. `roots`: each variable's labelled schemas (`variable_shapes.roots`)."""

    def __init__(self, schemas: SchemaSet, roots: Mapping[str, Labelled]) -> None:
        builder = MessageBuilder(schemas.definitions)
        self._declared: dict[str, str] = {}
        for variable, labelled in roots.items():
            if variable in _OBJECTS or len(labelled) != 1 or labelled[0][1] is None:
                continue
            message = builder.root(labelled[0][1], variable)
            if message is not None:
                self._declared[variable] = message
        self._kinds: dict[str, str | None] = {}
        for label, schema in roots.get("object", ()):
            if label not in self._kinds:
                self._kinds[label] = builder.root(schema, label) if schema is not None else None
        self._display = builder.display
        self._messages = Messages()
        self._messages.pool.AddSerializedFile(STRUCT_FILE)
        self._messages.pool.Add(builder.file)
        self._environments: dict[str | None, Any] = {}
        self._remembered: dict[tuple[str, str | None], tuple[TypeProblem, ...]] = {}

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds `object` is tried as (their schemas known)."""
        return tuple(kind for kind, message in self._kinds.items() if message is not None)

    def problems(self, text: str, expect: Expectation | None = None, expectation: str | None = None
                 ) -> tuple[TypeProblem, ...]:
        """The type errors of `text` (an expression with the policy's variables written in: `inline`),
        positions in `text`; empty when it type-checks. `expect` judges the result type; `expectation` names
        it, for remembering (the same text with the same expectation is checked once)."""
        key = (text, expectation)
        found = self._remembered.get(key)
        if found is None:
            found = self._problems(text, expect)
            if len(self._remembered) >= _REMEMBERED:
                self._remembered.clear()
            self._remembered[key] = found
        return found

    def _problems(self, text: str, expect: Expectation | None) -> tuple[TypeProblem, ...]:
        base = self._check(None, text, expect)
        if base.errors or not _READS_OBJECT.search(text):
            return base.errors
        refusals: dict[tuple[TypeProblem, ...], list[str]] = {}
        for kind, message in self._kinds.items():
            if message is None:
                return ()  # a kind of unknown schema: `object` may be anything
            outcome = self._check(kind, text, expect)
            if not outcome.errors and not outcome.fields_missing:
                return ()
            if outcome.errors:
                refusals.setdefault(outcome.errors, []).append(kind)
        if not refusals:
            return ()
        errors, kinds = next(iter(refusals.items()))
        shown = ", ".join(kinds[:3]) + (f" and {len(kinds) - 3} more" if len(kinds) > 3 else "")
        return tuple(TypeProblem(error.line, error.column, f"{error.message} (object as {shown})")
                     for error in errors)

    def _environment(self, kind: str | None) -> Any:
        found = self._environments.get(kind)
        if found is None:
            declared = {name: cel.Type(message) for name, message in self._declared.items()}
            message = self._kinds.get(kind) if kind is not None else None
            if message is not None:
                declared["object"] = declared["oldObject"] = cel.Type(message)
            found = self._environments[kind] = new_environment(
                LeakAccount(), declared=declared, messages=self._messages, extensions=[cross_numeric_ordering()])
        return found

    def _check(self, kind: str | None, text: str, expect: Expectation | None) -> _Outcome:
        try:
            returns = self._environment(kind).compile(text).return_type().name()
        except RuntimeError as error:
            found = [TypeProblem(int(line), int(column), self._named(message.removesuffix(" [INVALID_ARGUMENT]")))
                     for line, column, message in _ERROR.findall(str(error)) if not _OBJECT_AS_MAP.search(message)]
            kept = tuple(item for item in found if not any(marker in item.message for marker in _FIELD_ERRORS))
            return _Outcome(kept, len(kept) < len(found))
        problem = expect(self.type_name(returns)) if expect is not None else None
        return _Outcome((TypeProblem(0, 0, problem),) if problem is not None else (), False)

    def type_name(self, name: str) -> str:
        """A checked type as messages show it: `bool`, `list<Container>`, `optional_type<int>`."""
        return re.sub(r"\b[A-Z][A-Z_]*\b", lambda match: match.group(0).lower(), self._named(name))

    def _named(self, message: str) -> str:
        """cel-cpp's text with each schema message named as the schemas name it (`PodSpec`, not its full
        name in the generated file)."""
        return re.sub(re.escape(PACKAGE) + r"\.([A-Za-z0-9_]+)",
                      lambda match: self._display.get(f"{PACKAGE}.{match.group(1)}", match.group(1)), message)
