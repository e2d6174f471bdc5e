"""Kubernetes' format library: `format.dns1123Label()` ... `.validate(s)`, and `format.named('...')`.

`validate` gives the list of what is wrong (empty when the string is valid). Kubernetes wraps that list in
an optional (none when valid); the runtime cannot hand an optional back from Python, so Placer gives the
list and declares `hasValue()` and `value()` on it: `format.dns1123Label().validate(x).hasValue()` and
`.value().join(', ')` read as in Kubernetes. `orValue()` cannot be added (the runtime plans it as the
optional's own short-circuit): write `v.hasValue() ? v.value() : default`. `format.named('name')` must
name its format with a literal (it is resolved when the policy loads, see `literals`).
"""

import base64
import binascii
import re
from collections.abc import Callable
from datetime import date, datetime

from cel_expr_python import cel

from webhook.policy.cel.libraries.functions import BOOL, LIST_OF_STRING, STRING, CelFunctionError, Function
from webhook.policy.cel.libraries.messages import FORMAT, Messages, canonical_of
from webhook.policy.cel.libraries.urls import parse as parse_url
from webhook.support import names

_UUID = re.compile(r"^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$", re.IGNORECASE)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _prefix(check: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """Kubernetes' `...Prefix` formats: a name prefix may end with '-' (generateName)."""
    return lambda value: check(value[:-1] + "a" if value.endswith("-") else value)


def _uri(value: str) -> str | None:
    try:
        parse_url(value)
    except CelFunctionError as error:
        return str(error)
    return None


def _byte(value: str) -> str | None:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return "invalid base64"
    return None


def _date(value: str) -> str | None:
    if not _DATE.match(value):
        return "invalid date"
    try:
        date.fromisoformat(value)
    except ValueError:
        return "invalid date"
    return None


def _datetime(value: str) -> str | None:
    if not _DATETIME.match(value):
        return "invalid datetime"
    try:
        datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00").replace("t", "T"))
    except ValueError:
        return "invalid datetime"
    return None


FORMATS: dict[str, Callable[[str], str | None]] = {
    "dns1123Label": names.dns1123_label_error,
    "dns1123Subdomain": names.dns1123_subdomain_error,
    "dns1035Label": names.dns1035_label_error,
    "qualifiedName": names.qualified_name_error,
    "dns1123LabelPrefix": _prefix(names.dns1123_label_error),
    "dns1123SubdomainPrefix": _prefix(names.dns1123_subdomain_error),
    "dns1035LabelPrefix": _prefix(names.dns1035_label_error),
    "labelValue": names.label_value_error,
    "uri": _uri,
    "uuid": lambda value: None if _UUID.match(value) else "does not match the UUID format",
    "byte": _byte,
    "date": _date,
    "datetime": _datetime,
}


def validate(name: str, value: str) -> list[str]:
    problem = FORMATS[name](value)
    return [] if problem is None else [problem]


def functions(messages: Messages) -> list[Function]:
    format_type = cel.Type(FORMAT.full_name)
    constants = {name: messages.make(FORMAT, name) for name in FORMATS}

    def has_value(problems: list[str]) -> bool:
        return bool(problems)

    def value(problems: list[str]) -> list[str]:
        if not problems:
            raise CelFunctionError("optional.none() dereference")
        return problems

    declared = [
        Function(f"format.{name}", f"format.{name}", (), format_type, lambda constant=constant: constant)
        for name, constant in constants.items()
    ]
    return [
        *declared,
        Function("validate", "format-validate", (format_type, STRING), LIST_OF_STRING,
                 lambda message, text: validate(canonical_of(message, FORMAT), text), member=True),
        Function("hasValue", "format_errors_has_value", (LIST_OF_STRING,), BOOL, has_value, member=True),
        Function("value", "format_errors_value", (LIST_OF_STRING,), LIST_OF_STRING, value, member=True),
    ]
