"""The CEL environment a target API server checks an exported expression against, and why one is refused.

Kubernetes' base environment (`baseOpts` in staging/src/k8s.io/apiserver/pkg/cel/environment/base.go) adds
each library at the version it was introduced in; a MutatingAdmissionPolicy's expressions are compiled with
`environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())` (compilePolicy in
staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/mutating/compilation.go), and a new expression is
checked against the environment of the server's compatibility version, one minor behind it (`versions`).
What a policy's expressions may use, by the version it was introduced in base.go:

| library | introduced | in Placer's runtime |
|---|---|---|
| homogeneous aggregate literals (enforced), Kubernetes lists, regex, URLs | always | not enforced (checked here) |
| optional types, quantity, cross-type numeric comparisons | 1.28 | yes |
| cel-go strings extension, version 2 | 1.29 | yes (`ExtStrings(2)` here; Placer's has version 3's string `reverse`) |
| cel-go sets extension | 1.29 | yes |
| IP, CIDR; format | 1.30; 1.31 | yes |
| two-variable comprehensions | 1.32 | yes |
| semver | 1.33 | yes |
| cel-go lists extension v3 (`distinct`, `flatten`, `lists.range`, `reverse`, `slice`, `sort`...) | 1.34 | yes |
| cel-go bindings extension (`cel.bind`) | never (only DRA's device selectors add it) | yes |

So a 1.34 server (compatibility 1.33) has no lists extension; 1.35, 1.36 and 1.37 have it. The environment
here is built from those libraries only, and each exported expression is compiled in it the way the API server
compiles it (pkg/apis/admissionregistration/validation/validation.go, validateMutatingAdmissionPolicySpec,
and plugin/cel/compile.go, CompileCELExpression):

- with the types the API server declares (`api_types`): `object` and `oldObject` dyn, `namespaceObject` and
  `request` typed objects, `JSONPatch` in a mutation only, no `params` (an export writes no `paramKind`);
- a match condition by the stateless compiler: no `variables`, and it must evaluate to `bool`;
- the variables in order, each seeing those before it, as `variables.<name>` of the type its expression
  evaluates to (`checked_types.CelType.declared`: the composition's `convertCelTypeToDeclType`);
- a JSONPatch mutation seeing every variable, and evaluating to `list(JSONPatch)` exactly;
- every list and map literal homogeneous, optional members included (`checked_types.TypedAst.mixed_literals`).

What does not compile there is refused with what the target lacks or the API server's own words.
"""

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cel_expr_python import cel as cel_runtime
from cel_expr_python.ext import ext_optional, ext_strings

from webhook.export.api_types import ADMISSION_REQUEST, JSON_PATCH, NAMESPACE, QUALIFIED_OVERRIDES, ApiTypes
from webhook.export.checked_types import CelType, TypedAst
from webhook.export.versions import KubernetesVersion, compatibility_version, show
from webhook.policy.cel import libraries as cel_libraries
from webhook.policy.cel.checked_ast import AstError, Expr
from webhook.policy.cel.libraries.leaks import LeakAccount
from webhook.policy.cel.libraries.messages import Messages

STRINGS_VERSION = 2
SETS_FROM: KubernetesVersion = (1, 29)
TWO_VARIABLE_COMPREHENSIONS_FROM: KubernetesVersion = (1, 32)
LISTS_FROM: KubernetesVersion = (1, 34)
LISTS_RUNTIME_VERSION = 2
"""cel-go's lists version 3 is version 2's functions with cost estimators; cel-expr-python stops at 2."""

LISTS_FUNCTIONS = frozenset({"distinct", "flatten", "lists", "range", "reverse", "slice", "sort", "sortBy",
                             "@sortByAssociatedKeys"})
UNVERIFIED_FUNCTIONS = frozenset({"first", "last"})
"""Declared by cel-expr-python's optional extension; not established as part of Kubernetes' environment,
so an expression calling them is refused rather than risked."""

BOOL = CelType("bool")
PATCHES = CelType("list", params=(CelType("message", JSON_PATCH),))

_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")
_ERROR_LINE = re.compile(r"<input>:\d+:\d+: ([^|\[]*)")
_HAS = re.compile(r"\bhas\s*\(")


class Kind(Enum):
    """Where an expression goes in a MutatingAdmissionPolicy, which decides how the API server compiles it."""

    MATCH_CONDITION = "match condition"
    VARIABLE = "variable"
    MUTATION = "JSONPatch mutation"


@dataclass(frozen=True, slots=True)
class Variables:
    """The policy's variables an expression sees, in order, with the types the API server gives them."""

    declared: tuple[tuple[str, CelType], ...] = ()

    def add(self, name: str, cel_type: CelType) -> "Variables":
        return Variables((*self.declared, (name, cel_type)))


NO_VARIABLES = Variables()
"""What a match condition sees (and the first variable)."""


@dataclass(frozen=True, slots=True)
class Checked:
    refusal: str | None
    """Why the target's API server would refuse the expression (None: it takes it)."""
    output: CelType
    """What the expression evaluates to, as checked (the type a variable is then declared with)."""


@dataclass(slots=True)
class KubernetesCel:
    """Compiles exported expressions as a `target` API server does."""

    target: KubernetesVersion
    api_types: ApiTypes = field(init=False, repr=False)
    _base: dict[str, Any] = field(init=False, repr=False)
    _environments: dict[tuple[Variables, bool], Any] = field(default_factory=dict, init=False, repr=False)
    _verdicts: dict[tuple[Variables, Kind, str], Checked] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        messages = Messages()
        self.api_types = ApiTypes.add_to(messages.pool)
        kubernetes = cel_libraries.declarations(messages, LeakAccount())
        self._base = {
            "descriptor_pool": messages.pool,
            "config": _config(compatibility_version(self.target)),
            "extensions": [ext_strings.ExtStrings(STRINGS_VERSION), ext_optional.ExtOptional(),
                           kubernetes.extension],
            "functions": kubernetes.functions,
            "function_impls": kubernetes.implementations,
        }

    def environment(self, variables: Variables = NO_VARIABLES, *, field_types: bool = True) -> Any:
        """The environment an expression seeing `variables` is compiled in (a match condition: none).
        `field_types`: with the fields whose type no protobuf field has (`QUALIFIED_OVERRIDES`); without
        them such a field is the message's `dyn` one (`environment_for` says when)."""
        key = (variables, field_types)
        found = self._environments.get(key)
        if found is None:
            declarations: dict[str, Any] = {"object": cel_runtime.Type.DYN, "oldObject": cel_runtime.Type.DYN,
                                            "namespaceObject": cel_runtime.Type(NAMESPACE),
                                            "request": cel_runtime.Type(ADMISSION_REQUEST)}
            if field_types:
                declarations.update(QUALIFIED_OVERRIDES)
            for name, cel_type in variables.declared:
                declarations[f"variables.{name}"] = cel_type.declared()
            found = self._environments[key] = cel_runtime.NewEnv(variables=declarations, **self._base)
        return found

    def environment_for(self, source: str, variables: Variables = NO_VARIABLES) -> Any:
        """The environment `source` is compiled (and run) in: the one with every field's type, unless
        `source` tests one of `QUALIFIED_OVERRIDES` with has(). cel-expr-python's checker resolves
        `has(request.userInfo.extra)` as the variable declared for that field's type, so the test is the
        map itself rather than a bool; cel-go's checker takes a selection as a qualified name only when it is
        not a has() test (`checkSelect` and `computeQualifiers`, cel-go checker/checker.go), so kube-apiserver
        checks it as a test of the field, a `bool`. Without the variable the field is the
        message's `dyn` one, which has() tests; the rest of that expression then reads the field as `dyn`."""
        typed = self.environment(variables)
        if not _HAS.search(source):
            return typed
        plain = self.environment(variables, field_types=False)
        try:
            tree = TypedAst.of(plain.compile(source))
        except (RuntimeError, AstError):
            return typed
        tested = (node for node in tree.nodes() if node.kind == "select" and node.test_only)
        return plain if any(_qualified_name(node) in QUALIFIED_OVERRIDES for node in tested) else typed

    def refusal(self, source: str, kind: Kind, variables: Variables = NO_VARIABLES) -> str | None:
        """Why `target` would not take `source` as a `kind` seeing `variables` (None: it would)."""
        return self.check(source, kind, variables).refusal

    def declare(self, variables: Variables, name: str, source: str) -> tuple[Variables, str | None]:
        """`variables` with the variable `name` (its type: what `source` evaluates to), or unchanged and why
        the target would refuse `source`."""
        checked = self.check(source, Kind.VARIABLE, variables)
        if checked.refusal is not None:
            return variables, checked.refusal
        return variables.add(name, checked.output), None

    def check(self, source: str, kind: Kind, variables: Variables = NO_VARIABLES) -> Checked:
        seen = NO_VARIABLES if kind is Kind.MATCH_CONDITION else variables
        key = (seen, kind, source)
        if key not in self._verdicts:
            self._verdicts[key] = self._check(source, kind, seen)
        return self._verdicts[key]

    def _check(self, source: str, kind: Kind, variables: Variables) -> Checked:
        try:
            compiled = self.environment_for(source, variables).compile(source)
        except RuntimeError as error:
            return Checked(self._explain(str(error), kind), CelType("error"))
        try:
            typed = TypedAst.of(compiled)
        except AstError as error:
            return Checked(f"could not be checked for Kubernetes {show(self.target)} ({error})", CelType("error"))
        return Checked(self._refusal(typed, kind), typed.output)

    def _refusal(self, typed: TypedAst, kind: Kind) -> str | None:
        mixed = typed.mixed_literals()
        if mixed:
            _, expected, found = mixed[0]
            return (f"a list or map literal mixes member types (expected type '{expected.show()}' but found "
                    f"'{found.show()}'), which Kubernetes' CEL refuses (homogeneous aggregate literals): wrap its "
                    "members in dyn()")
        if kind is not Kind.MUTATION and any(t == PATCHES.params[0] for t in typed.types.values()):
            return f"uses `{JSON_PATCH}`, which the API server declares for a mutation only, not for a {kind.value}"
        wanted = {Kind.MATCH_CONDITION: BOOL, Kind.MUTATION: PATCHES}.get(kind)
        if wanted is not None and typed.output != wanted:
            return f"a {kind.value} must evaluate to {wanted.show()} but got {typed.output.show()}"
        calls = typed.calls()
        if any(name == "reverse" and not receiver_is_list for name, receiver_is_list in calls):
            return ("calls `reverse()` on a value not known to be a list: of a string it is cel-go's strings "
                    "extension version 3, which no Kubernetes version has (Kubernetes has version 2)")
        unverified = sorted({name for name, _ in calls} & UNVERIFIED_FUNCTIONS)
        if unverified:
            return (f"calls {', '.join(f'`{name}()`' for name in unverified)}, which Placer does not know to be in "
                    f"Kubernetes {show(self.target)}'s CEL environment")
        return None

    def _explain(self, message: str, kind: Kind) -> str:
        names = list(dict.fromkeys(_UNDECLARED.findall(message)))
        target = show(self.target)
        if "cel" in names:
            return ("uses `cel.bind` (cel-go's bindings extension), which no Kubernetes version's base CEL "
                    "environment has: bind a value with `[value].map(x, ...)[0]`")
        lists = [name for name in names if name in LISTS_FUNCTIONS]
        if lists and compatibility_version(self.target) < LISTS_FROM:
            return (f"uses {', '.join(f'`{name}`' for name in lists)} (cel-go's lists extension), which Kubernetes "
                    f"takes in new expressions from 1.35 on; the target is {target}"
                    + (" (and `reverse()` of a string is in no Kubernetes version)" if "reverse" in lists else ""))
        if "'reverse' applied to '(string" in message:
            return ("calls `reverse()` of a string (cel-go's strings extension version 3), which no Kubernetes "
                    "version has (Kubernetes has version 2)")
        read = [name for name in names if name == "variables" or name.startswith("variables.")]
        if read:
            where = ("a match condition is compiled without the policy's variables" if kind is Kind.MATCH_CONDITION
                     else "an expression sees the variables declared above it, and only those")
            return f"reads {', '.join(f'`{name}`' for name in read)}, which is not declared for it: {where}"
        if any(name == "params" or name.startswith("params.") for name in names):
            return ("reads `params`, which the API server declares only for a policy with a `paramKind`; an "
                    "exported policy has none")
        if names:
            return f"uses {', '.join(f'`{name}`' for name in names)}, which Kubernetes {target}'s CEL environment lacks"
        found = [line.strip() for line in _ERROR_LINE.findall(message)]
        return f"does not compile in Kubernetes {target}'s CEL environment: {'; '.join(found) or message}"


def _config(compatibility: KubernetesVersion) -> Any:
    """The cel-expr-python extensions of Kubernetes' base environment at `compatibility`."""
    extensions = []
    if compatibility >= SETS_FROM:
        extensions.append("  - name: sets\n")
    if compatibility >= TWO_VARIABLE_COMPREHENSIONS_FROM:
        extensions.append("  - name: two-var-comprehensions\n")
    if compatibility >= LISTS_FROM:
        extensions.append(f"  - name: lists\n    version: {LISTS_RUNTIME_VERSION}\n")
    return cel_runtime.NewEnvConfigFromYaml("name: kubernetes\nextensions:\n" + "".join(extensions))


def _qualified_name(node: Expr) -> str | None:
    """`a.b.c` for a selection of `c` from `a.b` (identifiers and selections only), else None."""
    parts: list[str] = []
    current: Expr | None = node
    while current is not None and current.kind == "select":
        parts.append(current.field)
        current = current.target
    if current is None or current.kind != "ident":
        return None
    return ".".join([current.name, *reversed(parts)])
