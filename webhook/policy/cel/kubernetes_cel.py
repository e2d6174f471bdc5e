"""Kubernetes' CEL libraries, function by function: which run in Placer, and what to write instead of the rest.

Platform engineers copy conditions from ValidatingAdmissionPolicy, MutatingAdmissionPolicy and CRD rules.
Where Placer's runtime cannot run a Kubernetes function, a policy using it must fail when it loads (never at
admission), with a message that names the Kubernetes library and says what to write instead. The same table
renders the conformance table of docs/cel.md (a test checks that the two agree).
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
    Library("lists (Kubernetes)", ("isSorted", "sum", "min", "max", "indexOf", "lastIndexOf", "includes"), True,
            "Python functions on `list(dyn)`: what Kubernetes' type-checker refuses for a typed list (`sum()` "
            "of strings) is an evaluation error"),
    Library("regex", ("find", "findAll"), True, "RE2, as in Go; a literal pattern is checked at load time"),
    Library("quantity", ("quantity", "isQuantity", "compareTo", "isGreaterThan", "isLessThan", "add", "sub",
                         "mul", "asInteger", "asApproximateFloat", "sign", "isInteger"), True,
            "exact values; `quantity('...')` with a literal is resolved at load time"),
    Library("quantity division", ("div", "divInt"), False,
            "compare with `mul()` instead (`q.isLessThan(limit.mul(n))`), or use `asApproximateFloat() / n`"),
    Library("URLs", ("url", "isURL", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath",
                     "getQuery"), True, "Go's `net/url` rules"),
    Library("IP and CIDR", ("ip", "isIP", "ip.isCanonical", "string(ip)", "cidr", "isCIDR", "containsIP",
                            "containsCIDR", "family", "isLoopback", "isUnspecified", "isLinkLocalMulticast",
                            "isLinkLocalUnicast", "isGlobalUnicast", "ip()", "prefixLength", "masked"), True,
            "Go's `net/netip` rules; `string()` of a CIDR is missing: write "
            "`string(c.ip()) + '/' + string(c.prefixLength())`"),
    Library("semver", ("semver", "isSemver", "major", "minor", "patch", "isGreaterThan", "isLessThan",
                       "compareTo"), True, "blang/semver rules, with the `normalize` argument"),
    Library("format", ("format.dns1123Label", "format.dns1123Subdomain", "format.dns1035Label",
                       "format.qualifiedName", "format.dns1123LabelPrefix", "format.dns1123SubdomainPrefix",
                       "format.dns1035LabelPrefix", "format.labelValue", "format.uri", "format.uuid",
                       "format.byte", "format.date", "format.datetime", "format.named", "validate"), True,
            "`format.named()` needs a string literal; read `validate()` with `hasValue()` and `value()` "
            "(not `orValue()`)"),
    Library("authorizer", ("authorizer",), False,
            "Placer has no authorizer; match on `request.userInfo.username` and `request.userInfo.groups`"),
    Library("JSON patch", ("jsonpatch.escapeKey",), False,
            "Placer writes its own patches; a key with `/` or `~` needs no escaping in a condition"),
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
    """The Markdown conformance table of docs/cel.md."""
    rows = ["| library | functions | in Placer |", "|---|---|---|"]
    for library in LIBRARIES:
        names = ", ".join(f"`{name}`" for name in library.functions)
        verdict = ("yes: " if library.supported else "not yet; ") + library.advice
        rows.append(f"| {library.name} | {names} | {verdict} |")
    return "\n".join(rows) + "\n"
