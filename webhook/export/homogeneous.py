"""Kubernetes' CEL checks that every list and map literal is homogeneous (`cel.HomogeneousAggregateLiterals`
and `cel.ValidateHomogeneousAggregateLiterals` in staging/src/k8s.io/apiserver/pkg/cel/environment/base.go,
`baseOpts`): `{'a': 'x', 'b': 1}` does not compile there. cel-expr-python does not make that check, so the
export makes it on the checked tree: every literal's members must have the same checked type (optional
entries `?key: ...` are not compared, as cel-go's validator skips them)."""

from typing import Any

from webhook.policy.cel.checked_ast import CheckedAst, Expr, decode

_TYPE_MAP = 3


def heterogeneous_literals(compiled: Any) -> list[str]:
    """A description of each list or map literal whose members' checked types differ (empty: all homogeneous)."""
    ast = CheckedAst.parse(compiled.serialize())
    types: dict[int, bytes] = {}
    for number, _, value in ast.checked:
        if number == _TYPE_MAP and isinstance(value, bytes):
            entry = {n: v for n, _, v in decode(value)}
            key, kind = entry.get(1), entry.get(2)
            if isinstance(key, int) and isinstance(kind, bytes):
                types[key] = kind
    problems: list[str] = []
    _walk(ast.root(), types, problems)
    return problems


def _walk(node: Expr, types: dict[int, bytes], problems: list[str]) -> None:
    if node.kind == "list":
        members = [Expr.parse(v) for n, _, v in node.body if n == 1 and isinstance(v, bytes)]
        _check(members, types, problems, "list")
    elif node.kind == "struct" and not any(n == 1 for n, _, _ in node.body):  # a map literal (no message name)
        values = []
        for number, _, entry in node.body:
            if number == 2 and isinstance(entry, bytes):
                fields = {n: v for n, _, v in decode(entry)}
                value = fields.get(4)
                if isinstance(value, bytes) and not fields.get(5):  # optional entries are not checked
                    values.append(Expr.parse(value))
        _check(values, types, problems, "map")
    children = list(node.loop) if node.kind == "comprehension" else node.operands
    for child in children:
        _walk(child, types, problems)


def _check(members: list[Expr], types: dict[int, bytes], problems: list[str], what: str) -> None:
    kinds = {types.get(member.id, b"?") for member in members}
    if len(kinds) > 1:
        problems.append(f"{what} literal (node {members[0].id}) mixes {len(kinds)} member types")
