"""Compile-time work on literal arguments of the Kubernetes library functions.

- `quantity('1Gi')`, `ip('10.0.0.1')`, `cidr(...)`, `semver(...)`, `url(...)` with a string literal become a
  message literal (`kubernetes.Quantity{exact: '1073741824'}`): no Python call at admission, nothing leaked,
  and a malformed literal is refused when the policy loads instead of failing every admission.
- `format.named('dns1123Label')` becomes the format (or `optional.none()` for an unknown name); with any
  other argument it is refused at load time, because the runtime cannot hand an optional back from Python.
- a literal pattern of `find` / `findAll` is compiled at load time (Kubernetes does the same).

The source is scanned with string literals masked, so text inside strings is never rewritten.
"""

import re
from collections.abc import Callable

from webhook.policy.cel.libraries import network, quantity, regex, semver, urls
from webhook.policy.cel.libraries.formats import FORMATS
from webhook.policy.cel.libraries.functions import CelFunctionError
from webhook.policy.cel.libraries.messages import CIDR, IP, QUANTITY, SEMVER, URL, ValueType, literal


class LiteralError(ValueError):
    """A literal argument that can never work; the message carries `<input>:line:column`."""


def _url(text: str) -> str:
    urls.parse(text)
    return text


_CONSTRUCTORS: dict[str, tuple[ValueType, Callable[[str], str]]] = {
    "quantity": (QUANTITY, quantity.canonical),
    "ip": (IP, lambda text: str(network.parse_ip(text))),
    "cidr": (CIDR, network.canonical_cidr),
    "semver": (SEMVER, semver.canonical),
    "url": (URL, _url),
}
_STRING = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"")
_SIMPLE_STRING = re.compile(r"^'([^'\\\n]*)'$|^\"([^\"\\\n]*)\"$")
_CALL_WITH_LITERAL = re.compile(
    r"(?<![\w.])(quantity|ip|cidr|semver|url|format\.named)\(\s*(\x00\d+\x00)\s*\)")
_FORMAT_NAMED = re.compile(r"(?<![\w.])format\.named\(")
_PATTERN_ARGUMENT = re.compile(r"\.(find|findAll)\(\s*(\x00\d+\x00)\s*[,)]")


def rewrite(source: str) -> str:
    """The expression with literal constructor calls resolved. Raises LiteralError."""
    strings: list[str] = []

    def mask(match: re.Match[str]) -> str:
        strings.append(match.group(0))
        return f"\x00{len(strings) - 1}\x00"

    masked = _STRING.sub(mask, source)

    def literal_text(token: str) -> str | None:
        simple = _SIMPLE_STRING.match(strings[int(token.strip("\x00"))])
        return None if simple is None else (simple.group(1) if simple.group(1) is not None else simple.group(2))

    def position(index: int) -> str:
        original = _unmask(masked[:index], strings)
        line = original.count("\n") + 1
        return f"<input>:{line}:{index_in_line(original) + 1}"

    for match in _PATTERN_ARGUMENT.finditer(masked):
        pattern = literal_text(match.group(2))
        if pattern is not None:
            try:
                regex.compile_pattern(pattern)
            except CelFunctionError as error:
                raise LiteralError(f"{position(match.start(2))}: {match.group(1)}(): {error}") from None

    def replace(match: re.Match[str]) -> str:
        name, text = match.group(1), literal_text(match.group(2))
        if text is None:
            return match.group(0)
        if name == "format.named":
            return f"optional.of(format.{text}())" if text in FORMATS else "optional.none()"
        value_type, canonical = _CONSTRUCTORS[name]
        try:
            return literal(value_type, canonical(text))
        except CelFunctionError as error:
            raise LiteralError(f"{position(match.start())}: {error}") from None

    rewritten = _CALL_WITH_LITERAL.sub(replace, masked)
    named = _FORMAT_NAMED.search(rewritten)
    if named is not None:
        raise LiteralError(f"{position(named.start())}: format.named() needs a string literal in Placer "
                           "(write format.dns1123Label() and the like, or format.named('dns1123Label'))")
    return _unmask(rewritten, strings)


def index_in_line(text: str) -> int:
    return len(text) - (text.rfind("\n") + 1)


def _unmask(text: str, strings: list[str]) -> str:
    return re.sub(r"\x00(\d+)\x00", lambda match: strings[int(match.group(1))], text)
