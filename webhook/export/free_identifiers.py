"""Placer's variables in a policy expression, renamed to the exported policy's, found on the checked tree.

A MutatingAdmissionPolicy sees `object`, `oldObject`, `request`, `namespaceObject` and its own `variables`;
Placer's `pod` and `workload` become variables the exported policy declares (`variables.placerPod`,
`variables.placerWorkload`). Only *free* identifiers are renamed: a field name (`c.?resources`,
`metadata.?labels.?workload`) is a field of a select or a string of an optional select on the tree, never an
identifier, and an identifier a comprehension binds (`containers.exists(pod, ...)`, `cel.bind(workload, ...)`)
is that comprehension's variable. `resources` free (Placer's effective totals) is not exportable; a
container's own `resources` field is.

The source is compiled (without Placer's literal resolution, so positions are the text's own) and each free
identifier is replaced at the position the parser recorded for it.
"""

from dataclasses import dataclass, field
from typing import Any

from webhook.export.cel_text import NotExportable
from webhook.policy.cel import environment as cel
from webhook.policy.cel.checked_ast import AstError, CheckedAst, Expr, decode
from webhook.policy.fields.field_paths import WORKLOAD_KIND, implied_kinds

PLACER_VARIABLES = {"pod": "variables.placerPod", "workload": "variables.placerWorkload"}
NOT_EXPORTABLE = {
    "resources": "reads `resources`, the scheduler's effective totals (containers summed, the largest init "
                 "container, quantities in units), which CEL in the API server does not compute the same way",
}
_SOURCE_INFO, _POSITIONS = 5, 4


@dataclass(slots=True)
class Rewriter:
    """Rewrites expressions of Placer's environment into the exported policy's, one compile per text."""

    environment: Any = field(default_factory=cel.new_environment, repr=False)
    _done: dict[str, str | NotExportable] = field(default_factory=dict, repr=False)
    _kinds: dict[str, tuple[frozenset[str] | None, frozenset[str] | None]] = field(default_factory=dict, repr=False)

    def kinds(self, source: str) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        """The kinds of the object, and of `workload`, that the condition `source` being true implies (its
        top-level guards, `object.kind == 'SparkApplication' && ...`); None for each it does not guard."""
        if source not in self._kinds:
            try:
                root = CheckedAst.parse(self.environment.compile(source).serialize()).root()
            except (RuntimeError, AstError):
                self._kinds[source] = (None, None)
            else:
                self._kinds[source] = (implied_kinds(root), implied_kinds(root, WORKLOAD_KIND))
        return self._kinds[source]

    def rewrite(self, source: str) -> str:
        """`source` with free `pod`/`workload` renamed; NotExportable when it reads `resources` free."""
        if source not in self._done:
            try:
                self._done[source] = _rewrite(self.environment, source)
            except NotExportable as why:
                self._done[source] = why
        done = self._done[source]
        if isinstance(done, NotExportable):
            raise done
        return done


def _rewrite(environment: Any, source: str) -> str:
    try:
        ast = CheckedAst.parse(environment.compile(source).serialize())
        root = ast.root()
    except (RuntimeError, AstError) as error:
        raise NotExportable(f"could not be analysed for export ({str(error).splitlines()[0][:120]})") from None
    positions = _positions(ast)
    found: list[tuple[int, str]] = []
    _free(root, frozenset(), found, positions)
    replacements: dict[int, str] = {}
    for position, name in found:
        if name in NOT_EXPORTABLE:
            raise NotExportable(NOT_EXPORTABLE[name])
        if source[position:position + len(name)] != name:
            raise NotExportable(f"`{name}` at {position} could not be located in the text")
        replacements[position] = name
    text = source
    for position in sorted(replacements, reverse=True):
        name = replacements[position]
        text = text[:position] + PLACER_VARIABLES[name] + text[position + len(name):]
    return text


def _positions(ast: CheckedAst) -> dict[int, int]:
    """Node id → offset in the source (in code points, as the parser counts), from the SourceInfo."""
    positions: dict[int, int] = {}
    for number, _, value in ast.checked:
        if number != _SOURCE_INFO or not isinstance(value, bytes):
            continue
        for info_number, _, entry in decode(value):
            if info_number == _POSITIONS and isinstance(entry, bytes):
                pair = {n: v for n, _, v in decode(entry)}
                node, offset = pair.get(1, 0), pair.get(2, 0)
                if isinstance(node, int) and isinstance(offset, int):
                    positions[node] = offset
    return positions


def _free(node: Expr, bound: frozenset[str], found: list[tuple[int, str]], positions: dict[int, int]) -> None:
    """Collect (position, name) of each free identifier named like one of Placer's variables."""
    if node.kind == "ident":
        if node.name not in bound and (node.name in PLACER_VARIABLES or node.name in NOT_EXPORTABLE):
            if node.id not in positions:
                raise NotExportable(f"`{node.name}` has no recorded position")
            found.append((positions[node.id], node.name))
        return
    if node.kind == "comprehension":
        iter_range, accu_init, condition, step, result = node.loop
        _free(iter_range, bound, found, positions)
        _free(accu_init, bound, found, positions)
        inner = bound | {name for name in (*node.iter_vars, node.accu_var) if name}
        _free(condition, inner, found, positions)
        _free(step, inner, found, positions)
        _free(result, bound | {node.accu_var}, found, positions)
        return
    for child in node.operands:
        _free(child, bound, found, positions)
