"""Kubernetes' URL library, reading URLs as Go's `net/url` does (`ParseRequestURI` to accept, `Parse` for
the parts): an absolute URI or an absolute path; the host's port must be digits; bad %-escapes are refused."""

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from cel_expr_python import cel

from webhook.policy.cel.libraries.functions import BOOL, STRING, CelFunctionError, Function
from webhook.policy.cel.libraries.messages import URL, Messages, canonical_of

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PATH_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~$&+,/:;=@")
_VALID_ENCODED = _PATH_SAFE | frozenset("!'()*[]%")


@dataclass(frozen=True, slots=True)
class ParsedURL:
    scheme: str
    host: str
    path: str
    raw_path: str
    query: str


def parse(text: str) -> ParsedURL:
    """Go's `url.ParseRequestURI` checks, then the parts as `url.Parse` sees them. Raises CelFunctionError."""
    def refuse(reason: str) -> CelFunctionError:
        return CelFunctionError(f"URL parse error during conversion from string: parse {text[:80]!r}: {reason}")

    if any(ord(character) < 0x20 or ord(character) == 0x7F for character in text):
        raise refuse("net/url: invalid control character in URL")
    rest, scheme = text, ""
    if not text.startswith("/"):
        match = _SCHEME.match(text)
        if match is None:
            raise refuse("invalid URI for request")
        scheme, rest = match.group(1).lower(), text[match.end():]
    before_fragment = rest.split("#", 1)[0]
    raw, _, query = before_fragment.partition("?")
    host = ""
    if scheme and not raw.startswith("/"):
        return ParsedURL(scheme, "", "", "", query)  # opaque, e.g. mailto:someone@example.com
    if scheme and raw.startswith("//"):
        authority, slash, path = raw[2:].partition("/")
        raw = slash + path
        host = _host(authority.rpartition("@")[2], refuse)
    if _BAD_ESCAPE.search(raw) or _BAD_ESCAPE.search(query):
        raise refuse("invalid URL escape")
    return ParsedURL(scheme, host, unquote(raw), raw, query)


def _host(host: str, refuse: Any) -> str:
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            raise refuse("missing ']' in host")
        port = host[end + 1:]
    else:
        colon = host.rfind(":")
        port = host[colon:] if colon >= 0 else ""
    if port and not ((port.startswith(":") and port[1:].isdigit()) or port == ":"):
        raise refuse(f"invalid port {port!r} after host")
    if _BAD_ESCAPE.search(host):
        raise refuse("invalid URL escape")
    return host


def hostname(host: str) -> str:
    if host.startswith("["):
        return host[1:host.find("]")]
    return host.rpartition(":")[0] if ":" in host else host


def port(host: str) -> str:
    if host.startswith("["):
        rest = host[host.find("]") + 1:]
        return rest[1:] if rest.startswith(":") else ""
    return host.rpartition(":")[2] if ":" in host else ""


def escaped_path(parsed: ParsedURL) -> str:
    """Go's `EscapedPath`: the path as written when that is a valid encoding of it, else escaped."""
    if parsed.raw_path and all(character in _VALID_ENCODED for character in parsed.raw_path) \
            and unquote(parsed.raw_path) == parsed.path:
        return parsed.raw_path
    return "".join(character if character in _PATH_SAFE else _escape(character) for character in parsed.path)


def _escape(character: str) -> str:
    return "".join(f"%{byte:02X}" for byte in character.encode())


def query(parsed: ParsedURL) -> dict[str, list[str]]:
    """Go's `Query()`: `&`-separated pairs, `+` as a space; a pair with `;` or a bad escape is left out."""
    values: dict[str, list[str]] = {}
    for pair in parsed.query.split("&"):
        if not pair or ";" in pair:
            continue
        key, _, value = pair.partition("=")
        if _BAD_ESCAPE.search(pair):
            continue
        values.setdefault(unquote(key.replace("+", " ")), []).append(unquote(value.replace("+", " ")))
    return values


def functions(messages: Messages) -> list[Function]:
    url_type = cel.Type(URL.full_name)

    def parsed(message: Any) -> ParsedURL:
        return parse(canonical_of(message, URL))

    def make(text: str) -> Any:
        parse(text)
        return messages.make(URL, text)

    def is_url(text: str) -> bool:
        try:
            parse(text)
        except CelFunctionError:
            return False
        return True

    return [
        Function("url", "string_to_url", (STRING,), url_type, make),
        Function("isURL", "is_url_string", (STRING,), BOOL, is_url),
        Function("getScheme", "url_get_scheme", (url_type,), STRING, lambda u: parsed(u).scheme, member=True),
        Function("getHost", "url_get_host", (url_type,), STRING, lambda u: parsed(u).host, member=True),
        Function("getHostname", "url_get_hostname", (url_type,), STRING, lambda u: hostname(parsed(u).host),
                 member=True),
        Function("getPort", "url_get_port", (url_type,), STRING, lambda u: port(parsed(u).host), member=True),
        Function("getEscapedPath", "url_get_escaped_path", (url_type,), STRING, lambda u: escaped_path(parsed(u)),
                 member=True),
        Function("getQuery", "url_get_query", (url_type,),
                 cel.Type.Map(cel.Type.STRING, cel.Type.List(cel.Type.STRING)), lambda u: query(parsed(u)),
                 member=True),
    ]
