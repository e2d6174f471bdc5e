"""The field paths an expression selects below each variable, with where in the expression it selects them.

Read from the checked syntax tree (after macro expansion), as `field_reads` does, but keeping every
selection and its node: `pod.metadata.lables['tier']` selects `pod.metadata`, `pod.metadata.lables` and
`pod.metadata.lables.tier`; `has(x.f)`, `x.?f`, `x['f']` and `x[?'f']` select `f` of `x`; a computed index
(`x[i]`, `x[0]`) selects an element (`ANY_INDEX`); a comprehension's variable over `x` stands for every
element of `x` (`EACH`), so `pod.spec.containers.exists(c, c.resources.limits ...)` selects
`pod.spec.containers[*].resources.limits`; `cel.bind(v, x, ...)` lets `v` stand for `x`. A value computed
by a function (`filter`, `map`, `orValue`...) is not followed: what is selected below it is not checked.

A guard on the object's kind narrows the kinds a selection can be read on: in `object.kind == 'JobSet' &&
object.spec.replicatedJobs...` (each operand of an `&&` chain, by the guards of the others) and in the first
branch of `object.kind == 'JobSet' ? ... : ...`. Guards are `object.kind`, `oldObject.kind`,
`request.kind.kind` or `request.requestKind.kind` compared (`==`, `in` a list) with string literals. An
operand of `&&` is only ever decisive when the others are true (CEL's commutative `&&`: a false operand
wins over an error), so reading it for those kinds only is exact.
"""

from dataclasses import dataclass

from webhook.policy.checked_ast import AstError, Expr
from webhook.policy.schemas import ANY_INDEX, EACH

Path = tuple[str, ...]
"""The variable, then the steps below it."""

_OPTIONAL_SELECTIONS = frozenset({"_[_]", "_[?_]", "_?._"})
_KIND_FIELDS = (("object", "kind"), ("oldObject", "kind"), ("request", "kind", "kind"),
                ("request", "requestKind", "kind"))
"""Paths whose value is the kind of the object under admission."""


@dataclass(frozen=True, slots=True)
class Selection:
    path: Path
    node: int
    """The id of the node that selects the path's last step (its position is in the source info)."""
    kinds: frozenset[str] | None = None
    """The object's kinds the selection is read for (a guard narrowed them); None: every kind."""


def selections(root: Expr, variables: frozenset[str]) -> list[Selection]:
    """Every path `root` selects below `variables`, in the order met; raises AstError on a tree it cannot
    follow (the caller then checks nothing for that expression)."""
    walk = _Walk(variables)
    walk.value(root, {})
    return walk.found


Scope = dict[str, Path | None]


class _Walk:
    def __init__(self, variables: frozenset[str]) -> None:
        self.variables = variables
        self.found: list[Selection] = []
        self._seen: set[tuple[Path, frozenset[str] | None]] = set()
        self.kinds: frozenset[str] | None = None
        """The kinds the node being walked is read for (narrowed by guards around it)."""

    def _select(self, path: Path, node: Expr) -> Path:
        if (path, self.kinds) not in self._seen:
            self._seen.add((path, self.kinds))
            self.found.append(Selection(path, node.id, self.kinds))
        return path

    def _narrowed(self, node: Expr, kinds: frozenset[str] | None, scope: Scope) -> None:
        """Walk `node` reading it for `kinds` (within the kinds already narrowed to)."""
        outer = self.kinds
        if kinds is not None:
            self.kinds = kinds if outer is None else outer & kinds
        try:
            self.value(node, scope)
        finally:
            self.kinds = outer

    def _guard(self, node: Expr, scope: Scope) -> frozenset[str] | None:
        """The kinds `node` being true implies, for a guard on the object's kind; None for anything else."""
        if node.kind != "call" or node.target is not None or len(node.args) != 2:
            return None
        first, second = node.args
        if node.function == "_==_":
            for path_side, literal_side in ((first, second), (second, first)):
                if isinstance(literal_side.literal, str) and self._is_kind(path_side, scope):
                    return frozenset({literal_side.literal})
        if node.function == "@in" and second.kind == "list" and self._is_kind(first, scope):
            names = [item.literal for item in second.operands]
            if names and all(isinstance(name, str) for name in names):
                return frozenset(str(name) for name in names)
        return None

    def _is_kind(self, node: Expr, scope: Scope) -> bool:
        steps: list[str] = []
        while node.kind == "select" and not node.test_only and len(node.operands) == 1:
            steps.insert(0, node.field)
            node = node.operands[0]
        if node.kind != "ident" or node.name.removeprefix(".") in scope:
            return False
        return (node.name.removeprefix("."), *steps) in _KIND_FIELDS

    def _conjuncts(self, node: Expr) -> list[Expr]:
        if node.kind == "call" and node.function == "_&&_" and node.target is None:
            return [part for arg in node.args for part in self._conjuncts(arg)]
        return [node]

    def value(self, node: Expr, scope: Scope) -> Path | None:
        """The path the node's value is found at, after walking what it uses; None if computed."""
        kind = node.kind
        if kind == "const":
            return None
        if kind == "ident":
            name = node.name.removeprefix(".")
            if name in scope:
                return scope[name]
            return (name,) if name in self.variables else None
        if kind == "select":
            if len(node.operands) != 1:
                raise AstError("a selection without its operand")
            path = self.value(node.operands[0], scope)
            if path is None:
                return None
            selected = self._select((*path, node.field), node)
            return None if node.test_only else selected
        if kind == "call" and node.function == "_&&_" and node.target is None:
            parts = self._conjuncts(node)
            guards = [self._guard(part, scope) for part in parts]
            for index, part in enumerate(parts):
                others = [guard for at, guard in enumerate(guards) if at != index and guard is not None]
                self._narrowed(part, frozenset.intersection(*others) if others else None, scope)
            return None
        if kind == "call" and node.function == "_?_:_" and node.target is None and len(node.args) == 3:
            condition, when_true, when_false = node.args
            self.value(condition, scope)
            self._narrowed(when_true, self._guard(condition, scope), scope)
            self.value(when_false, scope)
            return None
        if kind == "call":
            args = node.args
            if node.function in _OPTIONAL_SELECTIONS and node.target is None and len(args) == 2:
                path = self.value(args[0], scope)
                key = args[1].literal
                if not isinstance(key, str):
                    self.value(args[1], scope)
                    key = ANY_INDEX
                return None if path is None else self._select((*path, key), node)
            for operand in node.operands:
                self.value(operand, scope)
            return None
        if kind in ("list", "struct"):
            for operand in node.operands:
                self.value(operand, scope)
            return None
        if kind == "comprehension":
            return self._comprehension(node, scope)
        raise AstError(f"an expression node of unknown kind {kind!r}")

    def _comprehension(self, node: Expr, scope: Scope) -> Path | None:
        iter_range, accu_init, condition, step, result = node.loop
        first, second = node.iter_vars
        accu = node.accu_var
        range_path = self.value(iter_range, scope)
        inner = dict(scope)
        if second:  # `all(i, v, ...)`: an index or key, and the element
            inner[first] = None
            inner[second] = None if range_path is None else (*range_path, ANY_INDEX)
        else:
            inner[first] = None if range_path is None else (*range_path, EACH)
        keeps_accumulator = step.kind == "ident" and step.name == accu  # cel.bind
        accu_path = self.value(accu_init, scope)
        if not keeps_accumulator:
            accu_path = None
        inner[accu] = accu_path
        self.value(condition, inner)
        if not keeps_accumulator:
            self.value(step, inner)
        return self.value(result, {**scope, accu: accu_path})
