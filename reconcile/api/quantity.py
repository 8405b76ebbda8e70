"""Kubernetes resource quantities ("500m", "4Gi", "1e3", 2) as exact decimals: enough to
sum the requests of a gang (reconcile.policy.gang) and to compare two resource lists by value,
so "1000m" and "1" are the same amount and never cause an update."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}


def parse_quantity(value: object) -> Decimal:
    """The amount a quantity stands for; ValueError when it is not one."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str) or not value:
        raise ValueError(f"not a quantity: {value!r}")
    text = value.strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            return _number(text[: -len(suffix)], value) * factor
    if "e" in text.lower().lstrip("+-0123456789."):
        return _number(text, value)  # an exponent: 1e3, 2E-3
    suffix = text[-1] if text[-1] in "numkMGTPE" else ""
    return _number(text[: len(text) - len(suffix)], value) * _DECIMAL[suffix]


def _number(text: str, original: object) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:
        raise ValueError(f"not a quantity: {original!r}") from None


def format_quantity(amount: Decimal) -> str:
    """A canonical form: whole numbers plain; fractions in milli, micro or nano units
    when exact, rounded up to the nano otherwise (a minimum must not shrink)."""
    if amount == amount.to_integral_value():
        return str(int(amount))
    for suffix, factor in (("m", Decimal(1000)), ("u", Decimal(10**6))):
        scaled = amount * factor
        if scaled == scaled.to_integral_value():
            return f"{int(scaled)}{suffix}"
    nano = (amount * Decimal(10**9)).to_integral_value(rounding="ROUND_CEILING")
    return f"{int(nano)}n"


def sum_resources(lists: list[Mapping[str, object]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for resources in lists:
        for name, value in resources.items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(value)
    return total


def same_resources(a: Mapping[str, object] | None, b: Mapping[str, object] | None) -> bool:
    """Equal by value; an unparsable amount is compared as written."""
    a, b = a or {}, b or {}
    if a.keys() != b.keys():
        return False
    for name, value in a.items():
        try:
            if parse_quantity(value) != parse_quantity(b[name]):
                return False
        except ValueError:
            if value != b[name]:
                return False
    return True
