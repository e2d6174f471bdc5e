"""The type the checker gave each node of a compiled expression, compared, written and declared as the
Kubernetes API server's CEL (cel-go) does.

cel-expr-python serializes a compiled expression as a `cel.expr.CheckedExpr`, whose `type_map` holds the
checked type of every node (cel/expr/checked.proto, `Type`). Three things need it:

- the homogeneity of list and map literals (`cel.ValidateHomogeneousAggregateLiterals`, cel-go
  cel/validator.go `homogeneousAggregateLiteralValidator.Validate`): every element, every map key and every map
  value of a literal must have the type of the first one (`Type.IsEquivalentType`), an optional element or
  entry (`[?x]`, `{?'k': v}`) counted as the type it holds;
- the type a MutatingAdmissionPolicy variable is declared with for the expressions after it: its expression's
  output type, with `convertCelTypeToDeclType` (staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/
  composition.go) keeping primitives, timestamps, durations and lists and maps of them, and making anything
  else (an object, an optional, a type) `dyn`;
- the return type the API server requires (`CompileCELExpression` in plugin/cel/compile.go: `bool` for a match
  condition, `list(JSONPatch)` for a JSONPatch mutation, exactly).
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel as cel_runtime

from webhook.policy.cel.checked_ast import CheckedAst, Expr, decode

_TYPE_MAP = 3
# cel.expr.Type
_DYN, _NULL, _PRIMITIVE, _WRAPPER, _WELL_KNOWN, _LIST, _MAP, _FUNCTION, _MESSAGE, _PARAM, _TYPE, _ERROR = range(1, 13)
_ABSTRACT = 14
_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN_TYPES = {1: "any", 2: "timestamp", 3: "duration"}
# cel.expr.Expr.CreateList / CreateStruct.Entry
_ELEMENTS, _OPTIONAL_INDICES = 1, 2
_MESSAGE_NAME, _ENTRIES = 1, 2
_MAP_KEY, _VALUE, _OPTIONAL_ENTRY = 3, 4, 5


@dataclass(frozen=True, slots=True)
class CelType:
    """A checked type: `kind` is dyn, null, bool, int, uint, double, string, bytes, any, timestamp, duration,
    list, map, message, param, type, error, wrapper, function or abstract (`optional_type` is abstract)."""

    kind: str
    name: str = ""
    """The message, type parameter or abstract type's name; the primitive a wrapper wraps."""
    params: tuple["CelType", ...] = ()

    @staticmethod
    def parse(raw: bytes) -> "CelType":
        for number, _, value in decode(raw):
            if number == _DYN:
                return DYN
            if number == _NULL:
                return CelType("null")
            if number == _PRIMITIVE and isinstance(value, int):
                return CelType(_PRIMITIVES.get(value, "unspecified"))
            if number == _WRAPPER and isinstance(value, int):
                return CelType("wrapper", _PRIMITIVES.get(value, "unspecified"))
            if number == _WELL_KNOWN and isinstance(value, int):
                return CelType(_WELL_KNOWN_TYPES.get(value, "unspecified"))
            if number == _LIST and isinstance(value, bytes):
                return CelType("list", params=tuple(CelType.parse(v) for n, _, v in decode(value)
                                                    if n == 1 and isinstance(v, bytes)))
            if number == _MAP and isinstance(value, bytes):
                parts = {n: v for n, _, v in decode(value) if isinstance(v, bytes)}
                return CelType("map", params=tuple(CelType.parse(parts[n]) if n in parts else DYN for n in (1, 2)))
            if number == _FUNCTION:
                return CelType("function")
            if number == _MESSAGE and isinstance(value, bytes):
                return CelType("message", value.decode())
            if number == _PARAM and isinstance(value, bytes):
                return CelType("param", value.decode())
            if number == _TYPE and isinstance(value, bytes):
                return CelType("type", params=(CelType.parse(value),))
            if number == _ERROR:
                return CelType("error")
            if number == _ABSTRACT and isinstance(value, bytes):
                fields = decode(value)
                name = next((v.decode() for n, _, v in fields if n == 1 and isinstance(v, bytes)), "")
                return CelType("abstract", name, tuple(CelType.parse(v) for n, _, v in fields
                                                       if n == 2 and isinstance(v, bytes)))
        return DYN  # an empty Type: cel-expr-python leaves nothing it could not type

    def equivalent(self, other: "CelType") -> bool:
        """cel-go's `Type.IsEquivalentType`: same kind and name, parameters equivalent; type parameters are
        equivalent whatever their names."""
        if self.kind != other.kind or len(self.params) != len(other.params):
            return False
        if self.kind != "param" and self.name != other.name:
            return False
        return all(mine.equivalent(theirs) for mine, theirs in zip(self.params, other.params, strict=True))

    def show(self) -> str:
        """As cel-go's `FormatCELType` writes it (the API server's messages): `list(string)`, `map(string,
        dyn)`, `optional_type(int)`."""
        if self.kind in ("message", "param"):
            return self.name
        if self.kind == "error":
            return "!error!"
        if self.kind == "wrapper":
            return f"wrapper({self.name})"
        if self.kind == "abstract" and not self.params:
            return self.name
        name = self.name if self.kind == "abstract" else self.kind
        if not self.params:
            return name
        return f"{name}({', '.join(param.show() for param in self.params)})"

    def declared(self) -> Any:
        """The type the API server declares a variable of this type with (`convertCelTypeToDeclType`), as a
        cel-expr-python type."""
        if self.kind in _RUNTIME:
            return _RUNTIME[self.kind]
        if self.kind == "list":
            return cel_runtime.Type.List(self.params[0].declared())
        if self.kind == "map":
            return cel_runtime.Type.Map(self.params[0].declared(), self.params[1].declared())
        return cel_runtime.Type.DYN


DYN = CelType("dyn")
_RUNTIME = {"null": cel_runtime.Type.NULL, "bool": cel_runtime.Type.BOOL, "int": cel_runtime.Type.INT,
            "uint": cel_runtime.Type.UINT, "double": cel_runtime.Type.DOUBLE, "string": cel_runtime.Type.STRING,
            "bytes": cel_runtime.Type.BYTES, "timestamp": cel_runtime.Type.TIMESTAMP,
            "duration": cel_runtime.Type.DURATION}


@dataclass(frozen=True, slots=True)
class TypedAst:
    """A compiled expression's tree with the checked type of each node."""

    root: Expr
    types: dict[int, CelType]

    @staticmethod
    def of(compiled: Any) -> "TypedAst":
        ast = CheckedAst.parse(compiled.serialize())
        types: dict[int, CelType] = {}
        for number, _, value in ast.checked:
            if number == _TYPE_MAP and isinstance(value, bytes):
                entry = {n: v for n, _, v in decode(value)}
                key, kind = entry.get(1), entry.get(2)
                if isinstance(key, int) and isinstance(kind, bytes):
                    types[key] = CelType.parse(kind)
        return TypedAst(ast.root(), types)

    def type_of(self, node: Expr) -> CelType:
        return self.types.get(node.id, DYN)

    @property
    def output(self) -> CelType:
        return self.type_of(self.root)

    def nodes(self) -> Iterator[Expr]:
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.loop if node.kind == "comprehension" else node.operands)

    def calls(self) -> set[tuple[str, bool]]:
        """(function, whether its receiver is checked as a list) of every call."""
        return {(node.function, node.target is not None and self.type_of(node.target).kind == "list")
                for node in self.nodes() if node.kind == "call"}

    def mixed_literals(self) -> list[tuple[int, CelType, CelType]]:
        """(node id, expected, found) for each list or map literal member whose type differs from the first
        member's, as cel-go's homogeneity validator reports them (one per list; each key and value of a map)."""
        found: list[tuple[int, CelType, CelType]] = []
        for node in self.nodes():
            if node.kind == "list":
                self._list(node, found)
            elif node.kind == "struct" and not any(n == _MESSAGE_NAME for n, _, _ in node.body):
                self._map(node, found)
        return sorted(found)

    def _list(self, node: Expr, found: list[tuple[int, CelType, CelType]]) -> None:
        optional: set[int] = set()
        elements: list[Expr] = []
        for number, wire, value in node.body:
            if number == _ELEMENTS and isinstance(value, bytes):
                elements.append(Expr.parse(value))
            elif number == _OPTIONAL_INDICES:
                optional |= _indices(wire, value)
        first: CelType | None = None
        for index, element in enumerate(elements):
            kind = self._member(element, index in optional)
            if first is None:
                first = kind
            elif not first.equivalent(kind):
                found.append((element.id, first, kind))
                return

    def _map(self, node: Expr, found: list[tuple[int, CelType, CelType]]) -> None:
        first: tuple[CelType, CelType] | None = None
        for number, _, entry in node.body:
            if number != _ENTRIES or not isinstance(entry, bytes):
                continue
            fields = {n: v for n, _, v in decode(entry)}
            key, value = fields.get(_MAP_KEY), fields.get(_VALUE)
            if not isinstance(key, bytes) or not isinstance(value, bytes):
                continue
            key_node, value_node = Expr.parse(key), Expr.parse(value)
            types = (self.type_of(key_node), self._member(value_node, bool(fields.get(_OPTIONAL_ENTRY))))
            if first is None:
                first = types
                continue
            for member, expected, kind in zip((key_node, value_node), first, types, strict=True):
                if not expected.equivalent(kind):
                    found.append((member.id, expected, kind))

    def _member(self, node: Expr, optional: bool) -> CelType:
        kind = self.type_of(node)
        if optional and kind.params:
            return kind.params[0]
        return kind


def _indices(wire: int, value: int | bytes) -> set[int]:
    """The optional indices of a list literal (a packed or an unpacked repeated int32)."""
    if isinstance(value, int):
        return {value}
    out: set[int] = set()
    index = 0
    while index < len(value):
        number = shift = 0
        while True:
            byte = value[index]
            index += 1
            number |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        out.add(number)
    return out
