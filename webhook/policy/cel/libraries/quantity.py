"""Kubernetes' quantity library: `quantity()`, `isQuantity()`, comparisons, arithmetic, conversions.

Values are exact (fractions), as `resource.Quantity` is: `quantity('0.1').add(quantity('0.2')) ==
quantity('0.3')` holds, and `asInteger()` fails rather than round.
"""

import math
from fractions import Fraction
from typing import Any

from cel_expr_python import cel

from webhook.pods.quantity import InvalidQuantityError, exact_quantity
from webhook.policy.cel.libraries.functions import BOOL, DOUBLE, INT, STRING, CelFunctionError, Function
from webhook.policy.cel.libraries.messages import QUANTITY, Messages, canonical_of

INT64 = range(-(2**63), 2**63)


def canonical(text: str) -> str:
    """The canonical form of a quantity string (raises CelFunctionError): the exact value as `n` or `n/d`."""
    try:
        return str(exact_quantity(text))
    except InvalidQuantityError as error:
        raise CelFunctionError(f"quantity: {error}") from None


def functions(messages: Messages) -> list[Function]:
    q_type = cel.Type(QUANTITY.full_name)

    def value(message: Any) -> Fraction:
        return Fraction(canonical_of(message, QUANTITY))

    def make(number: Fraction) -> Any:
        return messages.make(QUANTITY, str(number))

    def compare(left: Any, right: Any) -> int:
        a, b = value(left), value(right)
        return (a > b) - (a < b)

    def as_integer(message: Any) -> int:
        number = value(message)
        if number.denominator != 1 or number.numerator not in INT64:
            raise CelFunctionError("cannot convert value to integer")
        return number.numerator

    def as_float(message: Any) -> float:
        try:
            return float(value(message))
        except OverflowError:
            return math.copysign(math.inf, value(message))

    def is_integer(message: Any) -> bool:
        number = value(message)
        return number.denominator == 1 and number.numerator in INT64

    def sign(message: Any) -> int:
        number = value(message)
        return (number > 0) - (number < 0)

    def is_quantity(text: str) -> bool:
        try:
            exact_quantity(text)
        except InvalidQuantityError:
            return False
        return True

    return [
        Function("quantity", "string_to_quantity", (STRING,), q_type, lambda text: make(Fraction(canonical(text)))),
        Function("isQuantity", "is_quantity_string", (STRING,), BOOL, is_quantity),
        Function("sign", "quantity_sign", (q_type,), INT, sign),
        Function("sign", "quantity_sign_member", (q_type,), INT, sign, member=True),
        Function("isGreaterThan", "quantity_is_greater_than", (q_type, q_type), BOOL,
                 lambda a, b: compare(a, b) == 1, member=True),
        Function("isLessThan", "quantity_is_less_than", (q_type, q_type), BOOL,
                 lambda a, b: compare(a, b) == -1, member=True),
        Function("compareTo", "quantity_compare_to", (q_type, q_type), INT, compare, member=True),
        Function("asApproximateFloat", "quantity_get_float", (q_type,), DOUBLE, as_float, member=True),
        Function("asInteger", "quantity_get_int", (q_type,), INT, as_integer, member=True),
        Function("isInteger", "quantity_is_integer", (q_type,), BOOL, is_integer, member=True),
        Function("add", "quantity_add", (q_type, q_type), q_type, lambda a, b: make(value(a) + value(b)), member=True),
        Function("add", "quantity_add_int", (q_type, INT), q_type, lambda a, n: make(value(a) + n), member=True),
        Function("sub", "quantity_sub", (q_type, q_type), q_type, lambda a, b: make(value(a) - value(b)), member=True),
        Function("sub", "quantity_sub_int", (q_type, INT), q_type, lambda a, n: make(value(a) - n), member=True),
        Function("mul", "quantity_multiply_int", (q_type, INT), q_type, lambda a, n: make(value(a) * n), member=True),
    ]
