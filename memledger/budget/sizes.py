"""The values a budget is written in: sizes (echoed as written), increases, durations.

Sizes go through `memledger.units.parse_bytes` (binary MiB/GiB and decimal MB/GB, never
confused; a bare "800" is refused). Each value keeps the text the user wrote so every report
can echo it back next to the bytes it was read as: `800MB` is 800,000,000 B (762.9 MiB).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from memledger.errors import UnitError
from memledger.units import format_bytes, parse_bytes, parse_duration
from memledger.values import Value


_Value = Value   # memledger/values.py: the one frozen, key-strict base


def _strip(msg: str) -> str:
    return msg.removeprefix("memledger: ")


class Size(_Value):
    """A byte count and the text it was read from (`"1.5GiB"` -> 1610612736)."""

    bytes: int = Field(ge=0, description="the size in bytes")
    text: str = Field(description="as the user wrote it, echoed back in reports")

    def __str__(self) -> str:
        # binary units read the same as memledger prints; decimal units and plain bytes get
        # their binary reading beside them so 2GB is never taken for 2 GiB
        if re.search(r"[KMGT]iB$", self.text, re.IGNORECASE):
            return self.text
        return f"{self.text} (= {format_bytes(self.bytes)})"


def to_size(v: Any) -> Any:
    """Before-validator: a str or int (bytes) becomes a Size; errors become ValueErrors so
    pydantic reports them with their location (`categories.activation: ...`)."""
    if isinstance(v, (Size, dict)):
        return v
    if isinstance(v, float):
        raise ValueError(f"size {v!r} has no unit; write {v:g}MiB, {v:g}GiB or {v:g}B")
    if isinstance(v, int) and not isinstance(v, bool):
        # a bare integer in TOML or a keyword argument: as ambiguous as the string "800"
        raise ValueError(f"size {v!r} has no unit; write \"{v}MiB\", \"{v}GiB\" or \"{v}B\"")
    try:
        return Size(bytes=parse_bytes(v), text=str(v).strip())
    except UnitError as e:
        raise ValueError(_strip(str(e))) from None


SizeField = Annotated[Size, BeforeValidator(to_size)]


class Increase(_Value):
    """How much the peak may grow over a baseline: a percentage or a byte count."""

    percent: float | None = Field(None, ge=0, description="allowed growth, % of the baseline")
    bytes: int | None = Field(None, ge=0, description="allowed growth in bytes")
    text: str = Field(description="as written, e.g. '5%' or '10MiB'")

    def allowed(self, base: int) -> int:
        """Highest peak that passes: base + growth, rounded down to whole bytes."""
        if self.percent is not None:
            # exact for integers: floor(base * pct / 100) without float error at 5%
            num, den = _ratio(self.percent)
            return base + (base * num) // (den * 100)
        return base + int(self.bytes or 0)

    def __str__(self) -> str:
        return self.text


def _ratio(p: float) -> tuple[int, int]:
    from fractions import Fraction

    f = Fraction(str(p))
    return f.numerator, f.denominator


_PCT = re.compile(r"^\s*\+?\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*$")


def to_increase(v: Any) -> Any:
    if isinstance(v, (Increase, dict)):
        return v
    s = str(v).strip()
    if s.startswith("-"):
        raise ValueError(f"increase {v!r} is negative; write e.g. 5% or 10MiB")
    m = _PCT.match(s)
    if m:
        return Increase(percent=float(m.group("num")), text=s)
    if isinstance(v, (int, float)) and not isinstance(v, bool) or re.fullmatch(r"[0-9.]+", s):
        raise ValueError(f"increase {v!r} has no unit; write {s}% or {s}MiB")
    try:
        return Increase(bytes=parse_bytes(s.lstrip("+")), text=s)
    except UnitError as e:
        raise ValueError(_strip(str(e)).replace("size", "increase", 1) +
                         " (or a percentage such as 5%)") from None


IncreaseField = Annotated[Increase, BeforeValidator(to_increase)]

class Duration(_Value):
    """A time in seconds and the text it was read from (`"250ms"` -> 0.25)."""

    seconds: float = Field(ge=0)
    text: str

    def __str__(self) -> str:
        return self.text


def to_duration(v: Any) -> Any:
    if isinstance(v, (Duration, dict)):
        return v
    s = str(v).strip()
    try:
        return Duration(seconds=parse_duration(s), text=s)
    except UnitError as e:
        raise ValueError(_strip(str(e))) from None


DurationField = Annotated[Duration, BeforeValidator(to_duration)]


def to_fraction(v: Any) -> Any:
    """Tolerance: '20%' -> 0.2. A bare number is refused (is 20 twenty percent or 20x?)."""
    if isinstance(v, float) and not isinstance(v, bool) and 0 <= v < 1:
        return v
    m = _PCT.match(str(v))
    if m is None:
        raise ValueError(f"tolerance {v!r} must be a percentage, e.g. 20%")
    return float(m.group("num")) / 100.0


FractionField = Annotated[float, BeforeValidator(to_fraction)]
