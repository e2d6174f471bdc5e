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
here is built from those libraries only and each exported expression is compiled in it: what does not
compile there is refused with the name it lacks.
"""

import re
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel as cel_runtime
from cel_expr_python.ext import ext_optional, ext_strings

from webhook.export.homogeneous import heterogeneous_literals
from webhook.export.versions import KubernetesVersion, compatibility_version, show
from webhook.policy.cel import libraries as cel_libraries
from webhook.policy.cel.checked_ast import AstError, CheckedAst, Expr, decode
from webhook.policy.cel.environment import MUTATING_ADMISSION_POLICY_VARIABLES
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

_TYPE_MAP, _LIST_TYPE = 3, 6
_UNDECLARED = re.compile(r"undeclared reference to '([^']+)'")
_ERROR_LINE = re.compile(r"<input>:\d+:\d+: ([^|\[]*)")


@dataclass(slots=True)
class KubernetesCel:
    """Compiles exported expressions (in the plain dialect: patch operations as maps) as `target` would."""

    target: KubernetesVersion
    environment: Any = field(init=False, repr=False)
    _verdicts: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.environment = _environment(compatibility_version(self.target))

    def refusal(self, source: str) -> str | None:
        """Why `target` would not take `source` (None: it would)."""
        if source not in self._verdicts:
            self._verdicts[source] = self._refusal(source)
        return self._verdicts[source]

    def _refusal(self, source: str) -> str | None:
        try:
            compiled = self.environment.compile(source)
        except RuntimeError as error:
            return self._explain(str(error))
        if heterogeneous_literals(compiled):
            return ("a list or map literal mixes member types, which Kubernetes' CEL refuses (homogeneous "
                    "aggregate literals): wrap its members in dyn()")
        calls = _calls(compiled)
        if any(name == "reverse" and not receiver_is_list for name, receiver_is_list in calls):
            return ("calls `reverse()` on a value not known to be a list: of a string it is cel-go's strings "
                    "extension version 3, which no Kubernetes version has (Kubernetes has version 2)")
        unverified = sorted({name for name, _ in calls} & UNVERIFIED_FUNCTIONS)
        if unverified:
            return (f"calls {', '.join(f'`{name}()`' for name in unverified)}, which Placer does not know to be in "
                    f"Kubernetes {show(self.target)}'s CEL environment")
        return None

    def _explain(self, message: str) -> str:
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
        if names:
            return f"uses {', '.join(f'`{name}`' for name in names)}, which Kubernetes {target}'s CEL environment lacks"
        found = [line.strip() for line in _ERROR_LINE.findall(message)]
        return f"does not compile in Kubernetes {target}'s CEL environment: {'; '.join(found) or message}"


def _environment(compatibility: KubernetesVersion) -> Any:
    """Kubernetes' base environment at `compatibility`, with a MutatingAdmissionPolicy's variables."""
    extensions = []
    if compatibility >= SETS_FROM:
        extensions.append("  - name: sets\n")
    if compatibility >= TWO_VARIABLE_COMPREHENSIONS_FROM:
        extensions.append("  - name: two-var-comprehensions\n")
    if compatibility >= LISTS_FROM:
        extensions.append(f"  - name: lists\n    version: {LISTS_RUNTIME_VERSION}\n")
    dyn = cel_runtime.Type.DYN
    declarations = dict.fromkeys(MUTATING_ADMISSION_POLICY_VARIABLES, cel_runtime.Type.Map(cel_runtime.Type.STRING,
                                                                                            dyn))
    declarations["object"] = dyn
    declarations["oldObject"] = dyn
    messages = Messages()
    kubernetes = cel_libraries.declarations(messages, LeakAccount())
    return cel_runtime.NewEnv(
        descriptor_pool=messages.pool,
        config=cel_runtime.NewEnvConfigFromYaml("name: kubernetes\nextensions:\n" + "".join(extensions)),
        variables=declarations,
        extensions=[ext_strings.ExtStrings(STRINGS_VERSION), ext_optional.ExtOptional(), kubernetes.extension],
        functions=kubernetes.functions,
        function_impls=kubernetes.implementations,
    )


def _calls(compiled: Any) -> set[tuple[str, bool]]:
    """(function, whether its receiver is checked as a list) of every call in the checked tree."""
    try:
        ast = CheckedAst.parse(compiled.serialize())
        root = ast.root()
    except AstError:
        return set()
    list_typed = _list_typed(ast)
    found: set[tuple[str, bool]] = set()
    stack: list[Expr] = [root]
    while stack:
        node = stack.pop()
        if node.kind == "call":
            target = node.target
            found.add((node.function, target is not None and target.id in list_typed))
        stack.extend(node.loop if node.kind == "comprehension" else node.operands)
    return found


def _list_typed(ast: CheckedAst) -> set[int]:
    """Ids of the nodes the checker typed as lists (cel.expr.Type's `list_type`)."""
    found: set[int] = set()
    for number, _, value in ast.checked:
        if number != _TYPE_MAP or not isinstance(value, bytes):
            continue
        entry = {n: v for n, _, v in decode(value)}
        node, kind = entry.get(1), entry.get(2)
        if isinstance(node, int) and isinstance(kind, bytes) and any(n == _LIST_TYPE for n, _, _ in decode(kind)):
            found.add(node)
    return found
