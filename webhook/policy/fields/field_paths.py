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

from webhook.policy.cel.ast_paths import PathWalk
from webhook.policy.cel.checked_ast import Expr
from webhook.policy.fields.schemas import ANY_INDEX, EACH

Path = tuple[str, ...]
"""The variable, then the steps below it."""

_KIND_FIELDS = (("object", "kind"), ("oldObject", "kind"), ("request", "kind", "kind"),
                ("request", "requestKind", "kind"))
"""Paths whose value is the kind of the object under admission."""
WORKLOAD_KIND = (("workload", "kind"),)
"""Placer's `workload.kind`: the object's kind, or for a Pod a controller made, its controller's."""


@dataclass(frozen=True, slots=True)
class Selection:
    path: Path
    node: int
    """The id of the node that selects the path's last step (its position is in the source info)."""
    kinds: frozenset[str] | None = None
    """The object's kinds the selection is read for (a guard narrowed them); None: every kind."""


def implied_kinds(root: Expr, fields: tuple[Path, ...] = _KIND_FIELDS) -> frozenset[str] | None:
    """The kinds `root` being true implies, by the guards (on `fields`: the object's kind by default) of its
    top-level `&&` chain; None when it has no such guard. `placer export` says with it which rules hold only
    for kinds the exported policy does not match."""
    walk = _Walk(frozenset())
    walk.kind_fields = fields
    guards = [guard for guard in (walk._guard(part, {}) for part in walk._conjuncts(root)) if guard is not None]
    return frozenset.intersection(*guards) if guards else None


def selections(root: Expr, variables: frozenset[str]) -> list[Selection]:
    """Every path `root` selects below `variables`, in the order met; raises AstError on a tree it cannot
    follow (the caller then checks nothing for that expression)."""
    walk = _Walk(variables)
    walk.use(root, {})
    return walk.found


Scope = dict[str, Path | None]


class _Walk(PathWalk[Path]):
    def __init__(self, variables: frozenset[str]) -> None:
        super().__init__(variables)
        self.found: list[Selection] = []
        self._seen: set[tuple[Path, frozenset[str] | None]] = set()
        self.kinds: frozenset[str] | None = None
        """The kinds the node being walked is read for (narrowed by guards around it)."""
        self.kind_fields: tuple[Path, ...] = _KIND_FIELDS
        """The paths a guard compares with kinds."""

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
            self.use(node, scope)
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
        return (node.name.removeprefix("."), *steps) in self.kind_fields

    def _conjuncts(self, node: Expr) -> list[Expr]:
        if node.kind == "call" and node.function == "_&&_" and node.target is None:
            return [part for arg in node.args for part in self._conjuncts(arg)]
        return [node]

    def root(self, name: str) -> Path:
        return (name,)

    def step(self, path: Path, key: str | None, node: Expr, test_only: bool) -> Path | None:
        selected = self._select((*path, ANY_INDEX if key is None else key), node)
        return None if test_only else selected

    def iterated(self, range_path: Path | None, two_variables: bool) -> tuple[Path | None, Path | None]:
        if range_path is None:
            return None, None
        if two_variables:  # `all(i, v, ...)`: an index or key, and the element
            return None, (*range_path, ANY_INDEX)
        return (*range_path, EACH), None

    def use(self, node: Expr, scope: Scope) -> None:
        self.origin(node, scope)

    def call(self, node: Expr, scope: Scope) -> Path | None:
        """`&&` and `?:` read their operands for the kinds their guards narrow to; other calls as any walk."""
        if node.function == "_&&_" and node.target is None:
            parts = self._conjuncts(node)
            guards = [self._guard(part, scope) for part in parts]
            for index, part in enumerate(parts):
                others = [guard for at, guard in enumerate(guards) if at != index and guard is not None]
                self._narrowed(part, frozenset.intersection(*others) if others else None, scope)
            return None
        if node.function == "_?_:_" and node.target is None and len(node.args) == 3:
            condition, when_true, when_false = node.args
            self.use(condition, scope)
            self._narrowed(when_true, self._guard(condition, scope), scope)
            self.use(when_false, scope)
            return None
        return super().call(node, scope)
