"""Kubernetes' CEL libraries (quantity, lists, regex, URLs, IP and CIDR, semver, format) for Placer.

They are Python functions registered with cel-expr-python, each call counted by a `LeakAccount` (the
runtime leaks what a Python function is given), and literal calls are resolved when the policy loads
(`literals`). `declarations()` is what the CEL environment registers.

Two limits of cel-expr-python shape the registration:
- a name that another extension or the standard library already declares (`indexOf` of strings, `hasValue`
  of optionals, `string`), or with a `dyn` parameter, goes through an extension (`CelExtension`), where each
  overload brings its own implementation;
- the runtime keeps one implementation per name and argument kinds, and every Kubernetes value is of the
  kind "message": overloads that differ only in their message types (`isGreaterThan` of a Quantity and of a
  Semver) are declared to the type-checker through `NewEnv(functions=...)` and share one implementation
  that dispatches on the arguments' message types.

May import pods and support.
"""

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.libraries import formats, lists, network, quantity, regex, semver, urls
from webhook.policy.cel.libraries.functions import CelFunctionError, Function
from webhook.policy.cel.libraries.leaks import LeakAccount
from webhook.policy.cel.libraries.messages import Messages


def all_functions(messages: Messages) -> list[Function]:
    return [
        *quantity.functions(messages), *lists.functions(), *regex.functions(), *urls.functions(messages),
        *network.functions(messages), *semver.functions(messages), *formats.functions(messages),
    ]


EXTENDS_DECLARED = frozenset({"indexOf", "lastIndexOf", "hasValue", "value", "orValue", "string", "includes"})
"""Names the strings and optional extensions or the standard library declare already, and names with a `dyn`
parameter (`NewEnv(function_impls=...)` registers `dyn` so that no argument matches it)."""


@dataclass(frozen=True, slots=True)
class Declarations:
    extension: Any
    """A `cel.CelExtension` with the overloads of names declared elsewhere already."""
    functions: list[Any]
    """`cel.FunctionDecl`s of the other names, for `NewEnv(functions=...)`."""
    implementations: dict[str, Callable[..., Any]]
    """Overload id → implementation, for `NewEnv(function_impls=...)`."""


def declarations(messages: Messages, leaks: LeakAccount) -> Declarations:
    """Every overload, declared; one counted implementation per name, member-ness and argument kinds."""
    extending: dict[str, list[Any]] = defaultdict(list)
    by_name: dict[str, list[Any]] = defaultdict(list)
    by_runtime_shape: dict[tuple[Any, ...], list[Function]] = defaultdict(list)
    for function in all_functions(messages):
        if function.name in EXTENDS_DECLARED:
            extending[function.name].append(cel.Overload(
                function.overload_id, function.returns, list(function.params), is_member=function.member,
                impl=leaks.wrap(function.impl)))
            continue
        by_name[function.name].append(cel.Overload(
            function.overload_id, function.returns, list(function.params), is_member=function.member))
        by_runtime_shape[(function.name, function.member, *map(_kind, function.params))].append(function)
    implementations = {
        group[0].overload_id: leaks.wrap(group[0].impl if len(group) == 1 else _dispatch(group))
        for group in by_runtime_shape.values()
    }
    extension = cel.CelExtension("kubernetes", [cel.FunctionDecl(name, found) for name, found in extending.items()])
    return Declarations(extension, [cel.FunctionDecl(name, found) for name, found in by_name.items()],
                        implementations)


def _kind(cel_type: Any) -> str:
    return "message" if cel_type.is_message() else str(cel_type.name()).split("<")[0]


def _dispatch(group: list[Function]) -> Callable[..., Any]:
    """One implementation for overloads that differ only in message types: the arguments' types choose."""
    by_types = {tuple(_message_name(param) for param in function.params): function.impl for function in group}

    def dispatch(*arguments: Any) -> Any:
        key = tuple(getattr(getattr(argument, "DESCRIPTOR", None), "full_name", None) for argument in arguments)
        implementation = by_types.get(key)
        if implementation is None:
            raise CelFunctionError(f"no such overload: {group[0].name} for {', '.join(map(str, key))}")
        return implementation(*arguments)

    dispatch.__name__ = group[0].name
    return dispatch


def _message_name(cel_type: Any) -> str | None:
    return str(cel_type.name()) if cel_type.is_message() else None
