"""Kubernetes' IP and CIDR libraries, with Go's `net/netip` rules: no zones, no IPv4-mapped IPv6, no leading
zeros in IPv4; canonical text as netip prints it (RFC 5952), so `==` compares addresses, not spellings.

`string()` of a CIDR is missing: the runtime keeps one Python implementation of `string` for all message
types and it serves `string(ip)`; write `string(c.ip()) + '/' + string(c.prefixLength())`."""

import ipaddress
import re
from typing import Any

from cel_expr_python import cel

from webhook.policy.cel.libraries.functions import BOOL, INT, STRING, CelFunctionError, Function
from webhook.policy.cel.libraries.messages import CIDR, IP, Messages, canonical_of

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_PREFIX_LENGTH = re.compile(r"^(0|[1-9][0-9]{0,2})$")


def parse_ip(text: str) -> Address:
    """Raises CelFunctionError with Kubernetes' messages."""
    if "%" in text:
        raise CelFunctionError(f"IP address {text!r} with zone value is not allowed")
    try:
        address = ipaddress.ip_address(text)
    except ValueError as error:
        raise CelFunctionError(f"IP Address {text!r} parse error during conversion from string: {error}") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise CelFunctionError(f"IPv4-mapped IPv6 address {text!r} is not allowed")
    return address


def parse_cidr(text: str) -> tuple[Address, int]:
    """The address as written (not masked) and the prefix length."""
    address_text, slash, length_text = text.partition("/")
    if not slash or not _PREFIX_LENGTH.match(length_text):
        raise CelFunctionError(
            f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): "
            "bad bits after slash")
    try:
        address = parse_ip(address_text)
    except CelFunctionError as error:
        raise CelFunctionError(f"network address parse error during conversion from string: {error}") from None
    length = int(length_text)
    if length > address.max_prefixlen:
        raise CelFunctionError(
            f"network address parse error during conversion from string: netip.ParsePrefix({text!r}): "
            "prefix length out of range")
    return address, length


def canonical_cidr(text: str) -> str:
    address, length = parse_cidr(text)
    return f"{address}/{length}"


def _network(address: Address, length: int) -> Any:
    return ipaddress.ip_network(f"{address}/{length}", strict=False)


def is_link_local_multicast(address: Address) -> bool:
    if address.version == 4:
        return address in ipaddress.ip_network("224.0.0.0/24")
    return (int(address) >> 112) & 0xFF0F == 0xFF02


def is_global_unicast(address: Address) -> bool:
    """Go's definition: anything but unspecified, broadcast, loopback, multicast and link-local unicast
    (private ranges included)."""
    if address.version == 4 and address == ipaddress.IPv4Address("255.255.255.255"):
        return False
    return not (address.is_unspecified or address.is_loopback or address.is_multicast
                or is_link_local_unicast(address))


def is_link_local_unicast(address: Address) -> bool:
    if address.version == 4:
        return address in ipaddress.ip_network("169.254.0.0/16")
    return address in ipaddress.ip_network("fe80::/10")


def _valid(parse: Any, text: str) -> bool:
    try:
        parse(text)
    except CelFunctionError:
        return False
    return True


def functions(messages: Messages) -> list[Function]:
    ip_type = cel.Type(IP.full_name)
    cidr_type = cel.Type(CIDR.full_name)

    def address(message: Any) -> Address:
        return ipaddress.ip_address(canonical_of(message, IP))

    def prefix(message: Any) -> tuple[Address, int]:
        return parse_cidr(canonical_of(message, CIDR))

    def contains_ip(cidr: Any, other: Address) -> bool:
        network_address, length = prefix(cidr)
        return other.version == network_address.version and other in _network(network_address, length)

    def contains_cidr(cidr: Any, other: tuple[Address, int]) -> bool:
        network_address, length = prefix(cidr)
        other_address, other_length = other
        return (other_address.version == network_address.version and length <= other_length
                and other_address in _network(network_address, length))

    def masked(cidr: Any) -> Any:
        network_address, length = prefix(cidr)
        return messages.make(CIDR, str(_network(network_address, length)))

    def ip_is(test: Any) -> Any:
        return lambda message: bool(test(address(message)))

    return [
        Function("ip", "string_to_ip", (STRING,), ip_type, lambda text: messages.make(IP, str(parse_ip(text)))),
        Function("isIP", "is_ip", (STRING,), BOOL, lambda text: _valid(parse_ip, text)),
        Function("ip.isCanonical", "ip_is_canonical", (STRING,), BOOL, lambda text: str(parse_ip(text)) == text),
        Function("family", "ip_family", (ip_type,), INT, lambda message: address(message).version, member=True),
        Function("isUnspecified", "ip_is_unspecified", (ip_type,), BOOL, ip_is(lambda a: a.is_unspecified),
                 member=True),
        Function("isLoopback", "ip_is_loopback", (ip_type,), BOOL, ip_is(lambda a: a.is_loopback), member=True),
        Function("isLinkLocalMulticast", "ip_is_link_local_multicast", (ip_type,), BOOL,
                 ip_is(is_link_local_multicast), member=True),
        Function("isLinkLocalUnicast", "ip_is_link_local_unicast", (ip_type,), BOOL, ip_is(is_link_local_unicast),
                 member=True),
        Function("isGlobalUnicast", "ip_is_global_unicast", (ip_type,), BOOL, ip_is(is_global_unicast),
                 member=True),
        Function("string", "ip_to_string", (ip_type,), STRING, lambda message: canonical_of(message, IP)),
        Function("cidr", "string_to_cidr", (STRING,), cidr_type,
                 lambda text: messages.make(CIDR, canonical_cidr(text))),
        Function("isCIDR", "is_cidr", (STRING,), BOOL, lambda text: _valid(parse_cidr, text)),
        Function("containsIP", "cidr_contains_ip_string", (cidr_type, STRING), BOOL,
                 lambda cidr, text: contains_ip(cidr, parse_ip(text)), member=True),
        Function("containsIP", "cidr_contains_ip_ip", (cidr_type, ip_type), BOOL,
                 lambda cidr, ip: contains_ip(cidr, address(ip)), member=True),
        Function("containsCIDR", "cidr_contains_cidr_string", (cidr_type, STRING), BOOL,
                 lambda cidr, text: contains_cidr(cidr, parse_cidr(text)), member=True),
        Function("containsCIDR", "cidr_contains_cidr", (cidr_type, cidr_type), BOOL,
                 lambda cidr, other: contains_cidr(cidr, prefix(other)), member=True),
        Function("ip", "cidr_ip", (cidr_type,), ip_type, lambda cidr: messages.make(IP, str(prefix(cidr)[0])),
                 member=True),
        Function("prefixLength", "cidr_prefix_length", (cidr_type,), INT, lambda cidr: prefix(cidr)[1],
                 member=True),
        Function("masked", "cidr_masked", (cidr_type,), cidr_type, masked, member=True),
    ]
