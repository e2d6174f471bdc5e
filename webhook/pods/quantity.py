"""Kubernetes resource quantities (`500m`, `1Gi`, `1e3`, `2`) as plain numbers.

CEL conditions compare resources as doubles (`resources.limits['nvidia.com/gpu'] > 0`). Kubernetes sends
quantities as strings in its own grammar, so they are converted here, in Python, rather than through a CEL
function (cel-expr-python leaks memory on every call of a Python-implemented function).
"""

import math
import re
from fractions import Fraction

_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)

_SUFFIX_FACTORS: dict[str, float] = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


class InvalidQuantityError(ValueError):
    """The value is not a Kubernetes quantity, or is out of the range a quantity can hold."""


def parse_quantity(value: object) -> float:
    """Return the numeric value of a quantity: cores for cpu, bytes for memory, a count otherwise.

    Accepts the forms the API server sends (strings) and the plain numbers a hand-written manifest may hold.
    Raises InvalidQuantityError for anything else, including infinities and NaN, so that a hostile object
    can never make a condition compare against `inf`.
    """
    if isinstance(value, bool):
        raise InvalidQuantityError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        common = _common_form(value)
        if common is not None:
            number = common
        else:
            match = _QUANTITY.match(value.strip())
            if match is None:
                raise InvalidQuantityError(f"not a quantity: {value[:40]!r}")
            mantissa, exponent, suffix = match.groups()
            try:
                number = float(mantissa + exponent) if exponent else float(mantissa) * _SUFFIX_FACTORS[suffix or ""]
            except OverflowError as error:
                raise InvalidQuantityError(f"quantity out of range: {value[:40]!r}") from error
    else:
        raise InvalidQuantityError(f"not a quantity: {type(value).__name__}")
    if not math.isfinite(number):
        raise InvalidQuantityError(f"quantity out of range: {str(value)[:40]!r}")
    return number


def _common_form(value: str) -> float | None:
    """The value of digits with at most a unit suffix (`4`, `500m`, `128Mi`: what manifests hold), read
    without the grammar (the same arithmetic as below, a third of the time); None for any other form."""
    if not value.isascii():
        return None
    if value.isdigit():
        return float(value)
    for cut in (2, 1):
        digits, suffix = value[:-cut], value[-cut:]
        if digits.isdigit() and suffix in _SUFFIX_FACTORS:
            return float(digits) * _SUFFIX_FACTORS[suffix]
    return None


_MAX_EXPONENT = 1000
"""Quantities beyond 10^±1000 are refused: Kubernetes holds them, but no resource is that large, and the
exact arithmetic of a hostile `1e999999999` would cost a worker its CPU and memory."""
_NANO = Fraction(1, 10**9)


def exact_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity string, as `resource.ParseQuantity` reads it: below a
    nano-unit it is rounded away from zero. Raises InvalidQuantityError (for CEL's `quantity()`)."""
    match = _QUANTITY.match(text)
    if match is None:
        raise InvalidQuantityError(f"not a quantity: {text[:40]!r}")
    mantissa, exponent, suffix = match.groups()
    try:
        value = Fraction(mantissa)
    except ValueError as error:  # more digits than Python converts
        raise InvalidQuantityError(f"quantity out of range: {text[:40]!r}") from error
    if exponent:
        power = int(exponent[1:])
        if abs(power) > _MAX_EXPONENT:
            raise InvalidQuantityError(f"quantity out of range: {text[:40]!r}")
        value *= Fraction(10) ** power
    elif suffix:
        value *= _EXACT_SUFFIX_FACTORS[suffix]
    if value.denominator != 1 and (value / _NANO).denominator != 1:
        nanos = value / _NANO
        rounded = math.ceil(nanos) if nanos > 0 else math.floor(nanos)
        value = rounded * _NANO
    return value


_EXACT_SUFFIX_FACTORS: dict[str, Fraction] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
