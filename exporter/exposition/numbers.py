"""A sample's value as the Prometheus text formats write it: Go's float formatting."""

from __future__ import annotations

_SPECIAL = {"inf": "+Inf", "-inf": "-Inf", "nan": "NaN"}
GO_EXPONENT_DIGITS = 6  # digits before the point past which Go writes an exponent


def go_float(value: float) -> str:
    """prometheus_client's `floatToGoString`, quicker on the finite values snapshots hold."""
    s = repr(float(value))
    dot = s.find(".")
    if dot < 0:  # inf, nan, or already in exponent form
        return _SPECIAL.get(s, s)
    if dot > GO_EXPONENT_DIGITS and value > 0:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s
