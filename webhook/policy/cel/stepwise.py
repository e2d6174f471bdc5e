"""Step-wise evaluation of an expression that exceeds the runtime's iteration budget.

cel-expr-python 0.1.3 stops one evaluation at its 10,000th comprehension step, over all nested loops, and the
limit is compiled in. A legitimate large Pod exceeds it (200 containers, 60 env vars each, in a nested `all`), which
would make a rule fail — a denial under `failurePolicy: Fail`, a skip otherwise, and a way to dodge a rule by
padding a list. Kubernetes instead limits a cost per evaluation generous for real objects.

So when an evaluation runs out of budget, Placer evaluates it again node by node: the outermost loops run
here, in Python, with CEL's exact comprehension semantics (accumulator, loop condition, step, result), and
everything else — each loop body, each operand — runs in the runtime as a sub-expression of the same checked
tree (`checked_ast`), with its own 10,000-step budget. Errors are values, as in CEL: `&&`, `||` and the
macros' `@not_strictly_false` absorb them exactly as the runtime does. The step-wise evaluation has its own
limit (`STEP_LIMIT` loop steps run here) and stops at the admission's deadline.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.checked_ast import FRESH_IDS, NO_LITERAL, AstError, CheckedAst, Expr, identifier
from webhook.policy.cel.runtime_errors import (
    BUDGET_EXCEEDED,
    RUNTIME_ITERATION_BUDGET,
    clean_runtime_message,
)

STEP_LIMIT = 10 * RUNTIME_ITERATION_BUDGET
"""Loop steps the step-wise evaluation runs itself, per evaluation (each loop body then has the runtime's
own budget): ten times the runtime's budget, far above what a real object needs."""


@dataclass(frozen=True, slots=True)
class Failure:
    """An error as a CEL value: it flows through the evaluation until a node absorbs it or it is the result."""

    message: str
    missing: bool = False
    """A key or field that is not there (NOT_FOUND): a condition reads it as false."""


_NOT_A_PATH = object()


class _OutOfBudget(Exception):
    """The runtime stopped a sub-evaluation at its iteration budget: take that node apart."""


class StepwiseError(Exception):
    """The step-wise evaluation itself gave up (its step limit, the deadline, a value it cannot pass on)."""


@dataclass
class Parts:
    """What a step-wise evaluation learns about one program, kept with it for the next large object: the
    parsed tree, the sub-expressions compiled so far and the nodes rebuilt with bound operands."""

    root: Expr | None = None
    ast: CheckedAst | None = None
    compiled: dict[bytes, Any] = field(default_factory=dict)
    rebuilt: dict[int, tuple[bytes, frozenset[str]]] = field(default_factory=dict)


@dataclass
class Stepwise:
    """One step-wise evaluation of one compiled expression over one activation's data."""

    environment: Any
    ast: CheckedAst
    parts: Parts
    data: Mapping[str, Any]
    convert: Callable[[Any], Any]
    """Runtime value → Python value that can be bound again (raises on one that cannot, e.g. an optional)."""
    deadline: float | None = None
    steps: int = 0

    def run(self, root: Expr) -> Any:
        """The expression's value, or a Failure."""
        return self._evaluate(root, {})

    def _evaluate(self, node: Expr, bindings: dict[str, Any]) -> Any:
        if node.kind == "ident" and node.name in bindings:
            return bindings[node.name]
        if node.literal is not NO_LITERAL:
            return node.literal
        if node.kind == "call" and node.function in _NON_STRICT:
            return _NON_STRICT[node.function](self, node, bindings)
        if node.kind == "call" and node.function == "_+_":
            return self._strict(node, bindings)  # map() and filter() append to their accumulator: no re-binding
        found = self._path(node, bindings)
        if found is not _NOT_A_PATH:
            return found
        try:
            return self._runtime(node.raw, node.identifiers, bindings)
        except _OutOfBudget:
            pass
        if node.kind == "comprehension":
            return self._comprehension(node, bindings)
        return self._strict(node, bindings)

    def _path(self, node: Expr, bindings: dict[str, Any]) -> Any:
        """`object.spec.containers` read straight from the Python values when every step is a map key that is
        there (the iteration range of a large loop: converting it back from the runtime would cost more than
        the loop); anything else (a missing key, a message field, `has()`) is left to the runtime."""
        if node.kind == "ident":
            return bindings[node.name] if node.name in bindings else self.data.get(node.name, _NOT_A_PATH)
        if node.kind == "list" and len(node.body) == 1:  # `[x]`, what map() and filter() append
            item = self._path(node.operands[0], bindings)
            return _NOT_A_PATH if item is _NOT_A_PATH or isinstance(item, Failure) else [item]
        if node.kind != "select" or node.test_only:
            return _NOT_A_PATH
        operand = node.target
        parent = _NOT_A_PATH if operand is None else self._path(operand, bindings)
        if isinstance(parent, dict) and node.field in parent:
            return parent[node.field]
        return _NOT_A_PATH

    def _runtime(self, raw: bytes, names: frozenset[str], bindings: dict[str, Any]) -> Any:
        """Evaluate one node in the runtime, with the variables it reads bound (the policy's and ours)."""
        expression = self.parts.compiled.get(raw)
        if expression is None:
            expression = self.environment.deserialize(self.ast.with_root(raw))
            self.parts.compiled[raw] = expression
        data = {name: self.data[name] for name in names if name in self.data}
        for name in names & bindings.keys():
            value = bindings[name]
            if isinstance(value, Failure):
                return value
            data[name] = value
        try:
            value = expression.eval(data=data)
        except RuntimeError as error:
            if BUDGET_EXCEEDED in str(error):
                raise _OutOfBudget from None
            return Failure(clean_runtime_message(str(error)))
        if value.type() == cel.Type.ERROR:
            message = str(value.value())
            return Failure(clean_runtime_message(message), missing=message.startswith("NOT_FOUND:"))
        try:
            return self.convert(value)
        except Exception as error:  # an optional or other value that cannot be bound for the next step
            raise StepwiseError(f"a value cannot be passed between the steps of a large evaluation: {error}") from None

    def _strict(self, node: Expr, bindings: dict[str, Any]) -> Any:
        """A call, selection, list or map whose operands are evaluated first: an operand's error is the result
        (CEL functions are strict); else the node runs with its operands bound as identifiers."""
        values = []
        for operand in node.operands:
            value = self._evaluate(operand, bindings)
            if isinstance(value, Failure):
                return value
            values.append(value)
        if not values:
            raise StepwiseError(f"a {node.kind} node exceeds the iteration budget on its own")
        if node.kind == "call" and node.function == "_+_" and all(isinstance(value, list) for value in values):
            return values[0] + values[1]  # the accumulator of map() and filter(): no quadratic re-conversion
        rebuilt = self.parts.rebuilt.get(node.id)
        if rebuilt is None:
            replacements = {operand.raw: identifier(FRESH_IDS + operand.id, _bound_name(operand))
                            for operand in node.operands}
            names = node.identifiers | {_bound_name(operand) for operand in node.operands}
            rebuilt = self.parts.rebuilt[node.id] = (node.with_operands(replacements), names)
        bound = dict(bindings)
        bound.update((_bound_name(operand), value) for operand, value in zip(node.operands, values, strict=True))
        return self._runtime(rebuilt[0], rebuilt[1], bound)

    def _comprehension(self, node: Expr, bindings: dict[str, Any]) -> Any:
        """CEL's comprehension, step by step: accu = init; for each element, while loop_condition: accu = step;
        then result. Over a list, one variable is the element, two are (index, element); over a map, the key,
        or (key, value)."""
        iter_range, accu_init, condition, step, result = node.loop
        iterable = self._evaluate(iter_range, bindings)
        if isinstance(iterable, Failure):
            return iterable
        first, second = node.iter_vars
        if isinstance(iterable, Mapping):
            pairs = list(iterable.items()) if second else [(key, None) for key in iterable]
        elif isinstance(iterable, list):
            pairs = list(enumerate(iterable)) if second else [(item, None) for item in iterable]
        else:
            return Failure(f"No matching overloads found : cannot iterate over {type(iterable).__name__}")
        scope = dict(bindings)
        scope[node.accu_var] = self._evaluate(accu_init, bindings)
        for left, right in pairs:
            self._count_step()
            scope[first] = left
            if second:
                scope[second] = right
            proceed = self._evaluate(condition, scope)
            if isinstance(proceed, Failure):
                return proceed
            if proceed is not True:
                break
            scope[node.accu_var] = self._evaluate(step, scope)
        scope.pop(first, None)
        scope.pop(second, None)
        return self._evaluate(result, scope)

    def _count_step(self) -> None:
        self.steps += 1
        if self.steps > STEP_LIMIT:
            raise StepwiseError(f"Iteration budget exceeded: an evaluation may take {STEP_LIMIT:,} outer "
                                f"comprehension steps, each loop inside them {RUNTIME_ITERATION_BUDGET:,}; "
                                "see docs/cel.md")
        if self.deadline is not None and self.steps % 64 == 0 and time.monotonic() > self.deadline:
            raise StepwiseError("the admission's deadline came during the evaluation")


def _bound_name(operand: Expr) -> str:
    return f"@placer{operand.id}"


def _logical(absorbing: bool) -> Callable[[Stepwise, Expr, dict[str, Any]], Any]:
    """`&&` (absorbing false) and `||` (absorbing true): the absorbing value decides whatever the other side
    is, an error included; else an error is the result; else both must be booleans."""
    def evaluate(self: Stepwise, node: Expr, bindings: dict[str, Any]) -> Any:
        left_node, right_node = node.args
        left = self._evaluate(left_node, bindings)
        if left is absorbing:
            return absorbing
        right = self._evaluate(right_node, bindings)
        if right is absorbing:
            return absorbing
        for side in (left, right):
            if isinstance(side, Failure):
                return side
            if not isinstance(side, bool):
                return Failure(f"No matching overloads found : {node.function}({type(side).__name__})")
        return not absorbing
    return evaluate


def _conditional(self: Stepwise, node: Expr, bindings: dict[str, Any]) -> Any:
    condition, when_true, when_false = node.args
    chosen = self._evaluate(condition, bindings)
    if isinstance(chosen, Failure):
        return chosen
    if not isinstance(chosen, bool):
        return Failure(f"No matching overloads found : _?_:_({type(chosen).__name__})")
    return self._evaluate(when_true if chosen else when_false, bindings)


def _not_strictly_false(self: Stepwise, node: Expr, bindings: dict[str, Any]) -> Any:
    """The loop condition of all() and exists(): an error keeps the loop going, as in the runtime."""
    value = self._evaluate(node.args[0], bindings)
    return True if isinstance(value, Failure) else value


_NON_STRICT: dict[str, Callable[[Stepwise, Expr, dict[str, Any]], Any]] = {
    "_&&_": _logical(False),
    "_||_": _logical(True),
    "_?_:_": _conditional,
    "@not_strictly_false": _not_strictly_false,
}


def evaluate(environment: Any, expression: Any, data: Mapping[str, Any], parts: Parts, *,
             convert: Callable[[Any], Any], deadline: float | None = None) -> Any:
    """Evaluate `expression` step-wise; its value, or a Failure (an error value, or why the step-wise
    evaluation gave up)."""
    try:
        if parts.ast is None or parts.root is None:
            parts.ast = CheckedAst.parse(expression.serialize())
            parts.root = parts.ast.root()
        return Stepwise(environment, parts.ast, parts, data, convert, deadline).run(parts.root)
    except AstError as error:
        return Failure(f"the expression exceeds the iteration budget and cannot be taken apart: {error}")
    except StepwiseError as error:
        return Failure(str(error))
