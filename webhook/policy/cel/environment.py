"""The CEL environment and the evaluation rules of docs/cel.md.

Everything that touches cel-expr-python lives here, so the rest of Placer deals in plain Python values and
three outcomes: a value, a missing key (a condition reads it as false), or an error.

Derived values (effective resources, workload replicas) are computed in Python and passed in as variables.
The only Python-implemented CEL functions are Kubernetes' libraries (`cel_libraries`): cel-expr-python 0.1.3
leaks what such a function is given, so every call is counted (`LeakAccount`) and the worker is recycled
before the leak matters; literal calls are resolved when the policy loads and cost nothing.
"""

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional, ext_strings

from webhook.policy.cel import cost, kubernetes_cel, stepwise
from webhook.policy.cel import libraries as cel_libraries
from webhook.policy.cel.checked_ast import AstError, CheckedAst, Expr
from webhook.policy.cel.field_reads import FieldReads, field_reads
from webhook.policy.cel.libraries.leaks import LeakAccount
from webhook.policy.cel.libraries.literals import LiteralError, rewrite
from webhook.policy.cel.libraries.messages import Messages
from webhook.policy.cel.runtime_errors import BUDGET_EXCEEDED, clean_runtime_message

VARIABLE_NAMES = (
    "object",
    "oldObject",
    "request",
    "namespaceObject",
    "workload",
    "pod",
    "resources",
    "variables",
)
"""Every variable a policy expression may reference."""

_ERROR_LINE = re.compile(r"(?:ERROR: )?(<input>:\d+:\d+: .*)")
_VARIABLE_REFERENCE = re.compile(r"\bvariables\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_]*)|\[\s*['\"]([^'\"]+)['\"]\s*\])")


class CelCompileError(ValueError):
    """An expression did not parse or type-check; the message carries `<input>:line:column`."""


@dataclass(frozen=True, slots=True)
class Program:
    """A compiled expression with the text it came from and the policy variables it reads."""

    source: str
    expression: Any
    returns: str
    """The checked result type, e.g. `bool`, `int`, `dyn` (dyn is only known at evaluation)."""
    reads_variables: frozenset[str]
    plain_result: bool = False
    """The checked type can hold no optional or type value: the result converts in one call."""
    parts: stepwise.Parts = field(default_factory=stepwise.Parts, compare=False, repr=False)
    """Sub-expressions compiled for step-wise evaluation (`stepwise`), kept for the next large object."""
    fields: FieldReads | None = field(default=None, compare=False, repr=False)
    """What the expression observes of each variable (`field_reads`); None: every variable, whole."""
    tree: Expr | None = field(default=None, compare=False, repr=False)
    """The checked syntax tree, for the load-time field checks; only when asked for (`keep_tree`), and
    dropped once checked (a walked tree holds every node's bytes)."""
    offsets: Mapping[int, int] = field(default_factory=dict, compare=False, repr=False)
    """With `tree`: each node's offset in `compiled_text`, in code points."""
    compiled_text: str = field(default="", compare=False, repr=False)
    """With `tree`: the text compiled, `source` with literal library calls resolved (`cel_libraries.literals`)."""
    reads_only_namespace: bool = field(default=False, compare=False, repr=False)
    """It reads no variable but `namespaceObject` (its analysis says so): its outcome is the same for every
    request in one namespace, and the engine keeps it per namespace (`webhook.policy.namespace_facts`)."""


@dataclass(frozen=True, slots=True)
class Result:
    """The outcome of one evaluation. Exactly one of: a value, a missing key, an error."""

    value: Any = None
    missing: str | None = None
    """Set when the expression read a map key or field the object does not have."""
    error: str | None = None
    """Set for every other failure: type mismatch, overflow, division by zero, iteration budget."""


BUILTIN_EXTENSIONS = ("sets", "lists", "two-var-comprehensions")
"""cel-go's extensions that cel-expr-python has compiled in, switched on through its environment config."""


MUTATING_ADMISSION_POLICY_VARIABLES = ("object", "oldObject", "request", "namespaceObject", "variables")
"""What a MutatingAdmissionPolicy's expressions see (`placer export` writes expressions for that)."""


def new_environment(leaks: LeakAccount | None = None, *, names: Sequence[str] = VARIABLE_NAMES,
                    declared: Mapping[str, Any] | None = None, messages: Messages | None = None,
                    extensions: Sequence[Any] = ()) -> Any:
    """Create the CEL environment: Placer's variables; the strings, optional and bindings extensions; the
    runtime's built-in `sets`, `lists` and two-variable comprehensions (`all(i, v, ...)`, `transformList`);
    and Kubernetes' libraries, their calls counted by `leaks` (a fresh account, without a budget, if None).

    `object` and `oldObject` are `dyn`, as in Kubernetes (`object != null` and `type(object) == map` compile);
    the other variables are maps of `dyn`, so that expressions type-check against objects of any shape and
    numeric comparisons across int and double (`resources.limits['cpu'] > 2`) are resolved at evaluation.
    `names`: the variables declared (MUTATING_ADMISSION_POLICY_VARIABLES: those of an exported policy).
    `declared`, `messages` and `extensions`: for the load-time type check (`webhook.policy.fields.type_check`),
    variables of declared types, the descriptor pool holding their messages, and more declarations.
    """
    dyn = cel.Type.DYN
    map_of_dyn = cel.Type.Map(cel.Type.STRING, dyn)
    declarations = dict.fromkeys(names, map_of_dyn)
    declarations["object"] = dyn
    declarations["oldObject"] = dyn  # null on CREATE
    if "resources" in names:
        declarations["resources"] = cel.Type.Map(cel.Type.STRING, map_of_dyn)
    declarations.update(declared or {})
    builtin = "".join(f"  - name: {name}\n" for name in BUILTIN_EXTENSIONS)
    messages = messages if messages is not None else Messages()
    kubernetes = cel_libraries.declarations(messages, leaks if leaks is not None else LeakAccount())
    return cel.NewEnv(
        descriptor_pool=messages.pool,
        config=cel.NewEnvConfigFromYaml(f"name: placer\nextensions:\n{builtin}"),
        variables=declarations,
        extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(), ext_bindings.ExtBindings(),
                    kubernetes.extension, *extensions],
        functions=kubernetes.functions,
        function_impls=kubernetes.implementations,
    )


def compile_expression(environment: Any, source: str, *, keep_tree: bool = False) -> Program:
    """Parse and type-check `source` once, at load time. Raises CelCompileError with every position.
    `keep_tree`: keep the checked tree and its source positions on the program (`Program.tree`).

    Literal calls of Kubernetes' library functions are resolved first (`cel_libraries.literals`); the
    positions of an error are those of the source as written.
    """
    try:
        resolved = rewrite(source)
    except LiteralError as error:
        raise CelCompileError(str(error)) from None
    try:
        expression = environment.compile(resolved)
    except RuntimeError as error:
        raise _compile_error(environment, source, error) from None
    offsets: dict[int, int] = {}
    try:
        checked = CheckedAst.parse(expression.serialize())
        tree: Expr | None = checked.root()
        offsets = checked.offsets() if keep_tree else {}
    except AstError:
        tree = None  # neither estimated (bounded when it runs) nor analysed (its variables are read whole)
    refusal = kubernetes_cel.load_time_refusal(source) or (_cost_refusal(tree) if tree is not None else None)
    if refusal is not None:
        raise CelCompileError(f"<input>: {refusal}")
    returns = expression.return_type().name().lower()
    reads = _field_reads(tree)
    reads_variables = frozenset(referenced_variables(source))
    return Program(
        source=source,
        expression=expression,
        returns=returns,
        reads_variables=reads_variables,
        plain_result=bool(_PLAIN_STATIC.match(returns)),
        fields=reads,
        reads_only_namespace=reads is not None and not reads_variables and reads.keys() <= {"namespaceObject"},
        tree=tree if keep_tree else None,
        offsets=offsets if keep_tree else {},
        compiled_text=resolved if keep_tree else "",
    )


def _field_reads(tree: Expr | None) -> FieldReads | None:
    if tree is None:
        return None
    try:
        return field_reads(tree, VARIABLE_NAMES)
    except AstError:
        return None


def _cost_refusal(tree: Expr) -> str | None:
    """An expression whose loops over literal ranges alone exceed the cost limit (`cost`)."""
    try:
        steps = cost.literal_steps(tree)
    except AstError:
        return None  # not estimated: bounded when it runs
    if steps <= cost.ESTIMATE_LIMIT:
        return None
    return (f"its loops over literal lists take {steps:,} comprehension steps on any object; an expression may "
            f"take {cost.ESTIMATE_LIMIT:,} (see docs/cel.md)")


def _compile_error(environment: Any, source: str, error: RuntimeError) -> CelCompileError:
    if source_error := _source_compile_error(environment, source):
        error = source_error
    message = _compile_error_message(str(error))
    advice = kubernetes_cel.compile_advice(message)
    return CelCompileError(f"{message} ({advice})" if advice else message)


def _source_compile_error(environment: Any, source: str) -> RuntimeError | None:
    """The error of the source as written (its positions are the user's), if it has one."""
    try:
        environment.compile(source)
    except RuntimeError as error:
        return error
    return None


def referenced_variables(source: str) -> list[str]:
    """The policy variable names an expression reads as `variables.x` or `variables['x']`, in order."""
    return [dotted or indexed for dotted, indexed in _VARIABLE_REFERENCE.findall(source)]


def variable_references(source: str) -> list[tuple[int, int, str]]:
    """Each `variables.x` / `variables['x']` of `source`: its start and end offsets, and the name."""
    return [(match.start(), match.end(), match.group(1) or match.group(2))
            for match in _VARIABLE_REFERENCE.finditer(source)]


def inline_variables(source: str, expressions: Mapping[str, str]) -> str:
    """`source` with every `variables.x` replaced by `(x's expression)`, recursively (variables only read
    variables declared before them, so this ends). One CEL evaluation then decides like Kubernetes' lazy
    variables: `variables.a || variables.b` is true when `a` is, whatever `b` does."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in expressions:
            return match.group(0)
        return "(" + inline_variables(expressions[name], expressions) + ")"

    return _VARIABLE_REFERENCE.sub(replace, source)


def variable_reference_position(source: str, name: str) -> str:
    """`<input>:line:column` of the first reference to `variables.<name>`, for load-time messages."""
    for match in _VARIABLE_REFERENCE.finditer(source):
        if name in match.groups():
            line = source.count("\n", 0, match.start()) + 1
            column = match.start() - (source.rfind("\n", 0, match.start()) + 1) + 1
            return f"<input>:{line}:{column}"
    return "<input>"


def evaluate(program: Program, bound: "Activation", *, stepwise_on_budget: bool = True) -> Result:
    """Evaluate on an activation and classify the outcome (docs/cel.md, "When missing means false").

    cel-expr-python reports most failures as a value of type ERROR, some (the iteration budget) as a
    RuntimeError: both become `Result.error`, so an error can never be read as a value, let alone as true.
    An evaluation that exceeds the runtime's iteration budget is evaluated again step by step (`stepwise`),
    unless `stepwise_on_budget` is False (a caller with a cheaper way to the same answer): then it is an error.
    """
    try:
        value = program.expression.eval(bound.runtime)
    except RuntimeError as error:
        if BUDGET_EXCEEDED in str(error) and stepwise_on_budget:
            return _stepwise(program, bound)
        return Result(error=clean_runtime_message(str(error)))
    if program.returns in _BOOLEAN_RESULTS:
        # A condition's value: converted without asking its type first (a third of an evaluation's cost).
        # A bool (or list of bools) is the value; an error converts to its message, a string, classified below.
        converted = value.plain_value()
        if converted is True or converted is False or isinstance(converted, list):
            return Result(value=converted)
    try:
        return _classify(value, program.plain_result)
    except _Unusable as unusable:
        return Result(error=f"the value cannot be used: {unusable}")
    except Exception as error:  # any other shape the runtime cannot hand over must not take the worker down
        return Result(error=f"the value cannot be used: {type(error).__name__}")


def _stepwise(program: Program, bound: "Activation") -> Result:
    outcome = stepwise.evaluate(bound.environment, program.expression, bound.data, program.parts,
                                convert=_bindable, deadline=bound.deadline)
    if isinstance(outcome, stepwise.Failure):
        return Result(missing=outcome.message) if outcome.missing else Result(error=outcome.message)
    return Result(value=outcome)  # converted by _bindable: no optional, type, timestamp or duration in it


_BOOLEAN_RESULTS = frozenset({"bool", "list<bool>"})


class _Unusable(Exception):
    """A value the runtime cannot convert to a Python value (an optional, a type)."""


_PLAIN_STATIC = re.compile(r"^(bool|int|uint|double|string|bytes|null_type)$|^list<(bool|int|uint|double|string)>$")
"""Checked result types whose values can never hold an optional or a type: converted in one call."""
_OPTIONAL_HINT = "an optional (from ?. or optional.of); read it with .orValue(default) or test it with .hasValue()"


def _classify(value: Any, plain: bool) -> Result:
    """Classify an evaluation result, converting it without ever handing the runtime a shape it crashes on.

    cel-expr-python 0.1.3 raises on an optional at the top and crashes the process (SIGSEGV) converting a
    list or map that holds one, so results that may contain one are walked element by element (walking is
    safe: each element says its type before it is converted).
    """
    kind = value.type()
    if kind == cel.Type.ERROR:
        try:
            message = str(value.value())
        except (TypeError, RuntimeError, SystemError):
            raise _Unusable(_OPTIONAL_HINT) from None
        if message.startswith("NOT_FOUND:"):
            return Result(missing=clean_runtime_message(message))
        return Result(error=clean_runtime_message(message))
    if plain:
        return Result(value=None if kind == cel.Type.NULL else value.plain_value())
    return Result(value=_plain(value))


def _plain(value: Any) -> Any:
    name = value.type().name()
    if name.startswith("LIST"):
        return [_plain(item) for item in value.value()]
    if name.startswith("MAP"):
        return {key: _plain(item) for key, item in value.value().items()}
    if name == "ERROR":
        raise _Unusable(_OPTIONAL_HINT + " (inside a list or map)")
    if name == "TYPE":
        raise _Unusable("a type value (type(x)); compare it inside the expression instead")
    if name in ("TIMESTAMP", "DURATION"):
        raise _Unusable(f"a {name.lower()}; convert it with string() or compare it inside the expression")
    return None if name == "NULL" else value.plain_value()


class Activation:
    """The variables of one evaluation context (one request, one pod template), kept as Python values (for a
    step-wise evaluation, and for memos keyed by them) and bound for the runtime on the first evaluation that
    needs it: a pass whose expressions all come from memos (`webhook.policy.observed_memo`) never binds them."""

    __slots__ = ("_runtime", "data", "deadline", "environment", "memo_key")

    def __init__(self, environment: Any, data: Mapping[str, Any], deadline: float | None = None) -> None:
        self.environment = environment
        self.data = data
        self.deadline = deadline
        """`time.monotonic()` after which a step-wise evaluation gives up (the admission's deadline)."""
        self.memo_key: bytes | bool | None = False
        """What an `ObservedMemo` keys this context's outcomes by, once it worked it out (False: not yet)."""
        self._runtime: Any = None

    @property
    def runtime(self) -> Any:
        """The variables bound for the runtime (the runtime converts each on its first use)."""
        runtime = self._runtime
        if runtime is None:
            runtime = self._runtime = self.environment.Activation(dict(self.data))
        return runtime


def activation(environment: Any, data: Mapping[str, Any], deadline: float | None = None) -> Activation:
    """The variables of one evaluation context, bound when first evaluated."""
    return Activation(environment, data, deadline)


def _bindable(value: Any) -> Any:
    """A runtime value as a Python value the runtime takes back as a variable, for the next step of a
    step-wise evaluation; an optional, a type, a timestamp or a duration cannot be."""
    name = value.type().name()
    if name.startswith("LIST"):
        return [_bindable(item) for item in value.value()]
    if name.startswith("MAP"):
        return {key: _bindable(item) for key, item in value.value().items()}
    if name == "ERROR":
        raise _Unusable(_OPTIONAL_HINT)
    if name == "TYPE":
        raise _Unusable("a type value (type(x))")
    if name in ("TIMESTAMP", "DURATION"):
        raise _Unusable(f"a {name.lower()} (the runtime does not take one back as a variable); convert it "
                        "with string() or compare it inside the loop")
    return None if name == "NULL" else value.plain_value()


def _compile_error_message(raw: str) -> str:
    """Reduce the runtime's multi-line report to `<input>:l:c: message` lines joined by `; `."""
    found = [match.group(1).removesuffix(" [INVALID_ARGUMENT]") for match in _ERROR_LINE.finditer(raw)]
    if not found:
        return clean_runtime_message(raw)
    return "; ".join(found).replace(" (in container '')", "")
