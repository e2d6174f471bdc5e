"""What each expression of a policy must return, and its type errors located in the text the user wrote.

The type check (`webhook.policy.fields.type_check`) needs the type of every `variables.x` an expression
reads: the expression is checked with its variables written in (`inline`), as Kubernetes' compiler gives
`variables` the types of their expressions (staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/
composition.go, `CompositedCompiler.CompileAndStoreVariable`). An error inside a variable written in is
that variable's own error, reported where the variable is declared; an error around it is mapped back to
the expression's own text.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.actions.base import ActionSpec
from webhook.policy.cel.environment import variable_references
from webhook.policy.fields.type_check import Expectation, TypeCheck

Expected = tuple[Expectation, str]
"""What an expression must return, and a name for it (the type check remembers results by text and name)."""


@dataclass(frozen=True, slots=True)
class Inlined:
    """An expression with its variables written in, and where each one was written."""

    text: str
    spans: tuple[tuple[int, int, int], ...]
    """(start in `text`, end in `text`, end in the source) of each reference replaced, in order."""

    def source_offset(self, offset: int) -> int | None:
        """The offset in the source of `offset` in `text`; None inside a variable written in."""
        shift = 0
        for start, end, source_end in self.spans:
            if offset < start:
                break
            if offset < end:
                return None
            shift = source_end - end
        return offset + shift


def inline(source: str, expressions: Mapping[str, str]) -> Inlined:
    """`source` with each `variables.x` replaced by `(x's expression, its own variables written in)`."""
    parts: list[str] = []
    spans: list[tuple[int, int, int]] = []
    length = last = 0
    for start, end, name in variable_references(source):
        if name not in expressions:
            continue
        written = "(" + inline(expressions[name], expressions).text + ")"
        parts.append(source[last:start])
        length += start - last
        spans.append((length, length + len(written), end))
        parts.append(written)
        length += len(written)
        last = end
    parts.append(source[last:])
    return Inlined("".join(parts), tuple(spans))


def type_errors(check: TypeCheck, environment: Any, source: str, variables: Mapping[str, str],
                expected: Expected | None = None) -> list[str]:
    """`<input>:line:column: message` for each type error of `source`, positions in `source`. `environment`:
    the evaluation environment, to tell a text that only fails once its variables are written in
    (`has(variables.x)`: `has()` takes a field selection): then nothing is said."""
    inlined = inline(source, variables)
    expect, expectation = expected if expected is not None else (None, None)
    found = check.problems(inlined.text, expect, expectation)
    if found and inlined.spans and not _compiles(environment, inlined.text):
        return []
    messages = []
    for problem in found:
        if problem.line == 0:
            messages.append(problem.message)
            continue
        offset = inlined.source_offset(_offset(inlined.text, problem.line, problem.column))
        if offset is None:
            continue  # the variable's own error, reported with the variable
        line = source.count("\n", 0, offset) + 1
        column = offset - (source.rfind("\n", 0, offset) + 1) + 1
        messages.append(f"<input>:{line}:{column}: {problem.message}")
    return messages


def _offset(text: str, line: int, column: int) -> int:
    start = 0
    for _ in range(line - 1):
        start = text.index("\n", start) + 1 if "\n" in text[start:] else start
    return min(start + column - 1, len(text))


def _compiles(environment: Any, text: str) -> bool:
    try:
        environment.compile(text)
    except RuntimeError:
        return False
    return True


def _condition(returns: str) -> str | None:
    """A condition decides whether the rule applies: `bool`, or `dyn` (known when evaluated)."""
    return None if returns in ("bool", "dyn") else f"must return bool, not {returns}"


CONDITION: Expected = (_condition, "condition")


def parameter(action: ActionSpec, name: str) -> Expected:
    """What a computed parameter may return: what the parameter's parsing can take
    (`webhook.actions.parameters`: numbers from numeric strings, lists from comma-separated strings, ...)."""
    param = action.param(name) if action.free_form is None else None
    kind = param.kind if param is not None else "string"
    return _PARAMETER_TYPES[kind], f"parameter:{kind}"


def _kind_of(returns: str) -> str:
    """A checked type's kind for the table below: `list<Container>` is a list, `PodSpec` an object."""
    base = returns.split("<", 1)[0]
    if base in ("int", "uint", "double"):
        return "number"
    if base in ("bool", "string", "list", "map", "dyn"):
        return base
    return "object" if base[:1].isupper() else base


def _accepting(what: str, *kinds: str) -> Expectation:
    def expect(returns: str) -> str | None:
        return None if _kind_of(returns) in (*kinds, "dyn") else f"must return {what}, not {returns}"
    return expect


_PARAMETER_TYPES: Mapping[str, Expectation] = {
    "integer": _accepting("an integer (or a string of one)", "number", "string"),
    "string": _accepting("a string", "bool", "number", "string"),
    "enum": _accepting("a string", "bool", "number", "string"),
    "values": _accepting("a list or a comma-separated string", "list", "string"),
    "keys": _accepting("a list or a comma-separated string", "list", "string"),
    "selector": _accepting("a label selector (a map) or a k=v,... string", "map", "object", "string"),
    "tolerations": _accepting("a list of tolerations", "list"),
}
"""Per parameter kind (`webhook.actions.base.ParamKind`): the result types the parameter's parsing takes."""
