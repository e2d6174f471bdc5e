"""How a library function is described, before it is registered with CEL."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel

STRING = cel.Type.STRING
INT = cel.Type.INT
BOOL = cel.Type.BOOL
DOUBLE = cel.Type.DOUBLE
DYN = cel.Type.DYN
LIST_OF_DYN = cel.Type.List(cel.Type.DYN)
LIST_OF_STRING = cel.Type.List(cel.Type.STRING)


@dataclass(frozen=True, slots=True)
class Function:
    """One overload: `name(params) -> returns`, or `params[0].name(params[1:])` when `member`."""

    name: str
    overload_id: str
    params: tuple[Any, ...]
    returns: Any
    impl: Callable[..., Any]
    member: bool = False


class CelFunctionError(ValueError):
    """A library function's error: becomes the CEL error of the call (the rule's error, as in Kubernetes)."""
