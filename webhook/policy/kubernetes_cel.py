"""Kubernetes' CEL libraries, function by function: which run in Placer, and what to write instead of the rest.

Platform engineers copy conditions from ValidatingAdmissionPolicy, MutatingAdmissionPolicy and CRD rules.
Where Placer's runtime cannot run a Kubernetes function, a policy using it must fail when it loads (never at
admission), with a message that names the Kubernetes library and says what to write instead. The same table
renders the conformance table of docs/cel.md (tests check that the two agree).
"""

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Library:
    name: str
    functions: tuple[str, ...]
    supported: bool
    advice: str
    """For an unsupported library: what to write instead. For a supported one: how it is provided."""


LIBRARIES = (
    Library("strings (cel-go ext)", ("charAt", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace",
                                     "split", "substring", "trim", "join", "quote", "reverse"), True,
            "the strings extension"),
    Library("optionals", ("optional.of", "optional.none", "hasValue", "value", "orValue", "or", "optMap",
                          "optFlatMap"), True, "the optional extension; `?.` and `[?key]` field selection"),
    Library("bindings", ("cel.bind",), True, "the bindings extension"),
    Library("sets (cel-go ext)", ("sets.contains", "sets.equivalent", "sets.intersects"), True,
            "the runtime's built-in sets extension"),
    Library("two-variable comprehensions", ("all(i, v, ...)", "exists(i, v, ...)", "existsOne(i, v, ...)",
                                            "transformList"), True,
            "the runtime's built-in extension (`transformMap`, `transformMapEntry` are refused at load time: "
            "the runtime cannot build their maps)"),
    Library("lists (cel-go ext)", ("distinct", "flatten", "lists.range", "reverse", "slice", "sort", "sortBy",
                                   "first", "last"), True, "the runtime's built-in lists extension"),
    Library("lists (Kubernetes)", ("isSorted", "sum", "min", "max"), False,
            "for a list of numbers use `l.all(x, ...)`, `l.exists(...)` and comparisons, or sort()"),
    Library("lists (Kubernetes): indexOf, lastIndexOf of a list", ("indexOf", "lastIndexOf"), False,
            "on strings they work; for a list use `v in l` or `l.exists(x, x == v)`"),
    Library("regex", ("find", "findAll"), False, "use `s.matches('re')` to test a match"),
    Library("quantity", ("quantity", "isQuantity", "compareTo", "isGreaterThan", "isLessThan", "add", "sub",
                         "asInteger", "asApproximateFloat", "sign", "isInteger"), False,
            "Placer's `resources.requests` and `resources.limits` hold every quantity of the pod as a "
            "number (cores, bytes, counts): compare those"),
    Library("URLs", ("url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath",
                     "getQuery"), False, "use string functions (`startsWith`, `split`, `matches`)"),
    Library("IP and CIDR", ("ip", "isIP", "cidr", "isCIDR", "containsIP", "containsCIDR", "family",
                            "isLoopback", "isUnspecified", "isLinkLocalMulticast", "isLinkLocalUnicast",
                            "isGlobalUnicast", "prefixLength", "masked"), False,
            "use `matches()` with an address pattern"),
    Library("semver", ("semver", "isSemver", "major", "minor", "patch"), False,
            "split the version with `split('.')` and compare `int()` of the parts"),
    Library("format", ("format.dns1123Label", "format.dns1123Subdomain", "format.qualifiedName",
                       "format.labelValue", "format.uri", "format.uuid", "format.byte", "format.date",
                       "format.datetime", "format.named", "validate"), False,
            "use `matches()` with the pattern (e.g. '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')"),
)

_UNSUPPORTED = {
    name.split(".")[-1]: library
    for library in LIBRARIES
    if not library.supported
    for name in library.functions
}
_RUNTIME_FAILURES = {
    "transformMap": "transformMap compiles but the runtime cannot build its map; build a list with "
                    "transformList, or test the map with all(k, v, ...) / exists(k, v, ...)",
    "transformMapEntry": "transformMapEntry compiles but the runtime cannot build its map; use transformList",
}
_CALL = re.compile(r"(?<![\w$])([A-Za-z_][\w]*)\s*\(")
_QUOTED = re.compile(r"'([A-Za-z_][\w.]*)'")
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


def called_functions(source: str) -> list[str]:
    """Names called in the expression (member or global), string literals left out."""
    return _CALL.findall(_STRING.sub("''", source))


def compile_advice(message: str) -> str | None:
    """For a compile error naming a function (`undeclared reference to 'quantity'`, `no matching overload for
    'indexOf'`): the Kubernetes library it is from, if Placer lacks it, and what to write instead."""
    for name in _QUOTED.findall(message):
        library = _UNSUPPORTED.get(name)
        if library is not None:
            return f"{name}() is from Kubernetes' {library.name} CEL library, which Placer does not support yet: " \
                   f"{library.advice}"
    return None


def load_time_refusal(source: str) -> str | None:
    """A function that compiles but can never run in Placer's runtime: refuse the policy when it loads."""
    for name in called_functions(source):
        if name in _RUNTIME_FAILURES:
            return _RUNTIME_FAILURES[name]
    return None


def conformance_table() -> str:
    """The Markdown table of docs/cel.md."""
    rows = ["| library | functions | in Placer |", "|---|---|---|"]
    for library in LIBRARIES:
        names = ", ".join(f"`{name}`" for name in library.functions)
        verdict = ("yes: " if library.supported else "not yet; ") + library.advice
        rows.append(f"| {library.name} | {names} | {verdict} |")
    return "\n".join(rows) + "\n"
