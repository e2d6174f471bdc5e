"""Kubernetes name and label syntax, checked before Placer writes a value into an object.

The API server rejects the user's request when a webhook's patch yields an invalid object, even with
`failurePolicy: Ignore` (fixtures, reactions g-invalid-object-ignore). Every value a policy can write is
therefore checked with the same rules the API server applies, at load time where possible.
"""

import re

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def dns1123_label_error(value: str) -> str | None:
    """Why `value` is not a DNS-1123 label (rule names, namespace names), or None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1123_LABEL.match(value):
        return "must consist of lower case alphanumeric characters or '-', and start and end with one"
    return None


def dns1123_subdomain_error(value: str) -> str | None:
    """Why `value` is not a DNS-1123 subdomain (scheduler and priority class names), or None."""
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.match(value):
        return "must be lower case alphanumeric characters, '-' or '.', starting and ending with one"
    return None


def qualified_name_error(value: str) -> str | None:
    """Why `value` is not a qualified name (label and annotation keys, topology keys), or None."""
    prefix, slash, name = value.rpartition("/")
    if slash:
        if not prefix:
            return "prefix part must be non-empty"
        problem = dns1123_subdomain_error(prefix)
        if problem:
            return f"prefix part {problem}"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME_PART.match(name):
        return "name part must consist of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


def label_value_error(value: str) -> str | None:
    """Why `value` is not a valid label value, or None. Empty is valid."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _LABEL_VALUE.match(value):
        return "must be empty or alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    return None


_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def dns1035_label_error(value: str) -> str | None:
    """Why `value` is not a DNS-1035 label (Service names), or None."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1035_LABEL.match(value):
        return "must consist of lower case alphanumeric characters or '-', start with a letter and end with an " \
               "alphanumeric character"
    return None
