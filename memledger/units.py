"""Byte sizes: parse what people write, print what people read.

Binary units (KiB, MiB, GiB, TiB = 2^10..2^40) and decimal units (KB, MB, GB, TB = 10^3..10^12)
are both accepted and never confused. A bare number is refused: "800" could mean anything,
and so is a lower-case b ("1Gb" is a gigabit by convention, not a gigabyte).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from memledger.errors import UnitError

MAX_BYTES = 2**63 - 1  # int64, as the ledger's numpy columns hold bytes

_UNITS = {
    "b": 1,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}
_SIZE = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>[A-Za-z]+)\s*$")


def parse_bytes(text: str | int) -> int:
    """`"1.5GiB"` -> 1610612736; `"2GB"` -> 2000000000; ints pass through (they are bytes).

    Raises UnitError for a missing or unknown unit and for negative sizes.
    """
    if isinstance(text, bool):
        raise UnitError(f"size {text!r} is not a size; write e.g. 800MiB")
    if isinstance(text, int):
        if text < 0:
            raise UnitError(f"size {text} is negative")
        return text
    s = str(text).strip()
    if s.startswith("-"):
        raise UnitError(f"size {text!r} is negative; sizes are >= 0")
    m = _SIZE.match(s)
    if m is None:
        if re.fullmatch(r"[0-9.]+", s):
            raise UnitError(f"size {text!r} has no unit; write {s}MiB, {s}GiB or {s}B")
        raise UnitError(f"cannot read size {text!r}; write e.g. 512MiB, 1.5GiB or 2GB")
    written = m.group("unit")
    unit = written.lower()
    if unit in _UNITS and written.endswith("b"):   # "1Gb" is a gigabit by convention
        raise UnitError(f"{text!r}: a lower-case b is a bit; memledger counts bytes: write "
                        f"{m.group('num')}{written[:-1].upper().replace('I', 'i')}B")
    if unit not in _UNITS:
        raise UnitError(
            f"unknown unit {m.group('unit')!r} in {text!r}; use B, KiB, MiB, GiB, TiB (binary) "
            "or KB, MB, GB, TB (decimal)"
        )
    num = m.group("num")
    if len(num) > 30:  # more digits than any real size; Decimal would still be exact
        raise UnitError(f"size {text[:20]!r}... has {len(num)} digits; write e.g. 512MiB")
    value = round(Decimal(num) * _UNITS[unit])  # exact: '1.5GiB' is 1610612736, no float
    if value > MAX_BYTES:
        raise UnitError(f"size {text!r} is more than 8 EiB (2^63 bytes), larger than any "
                        "memory; write e.g. 512MiB")
    return int(value)


_SHARE = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*%\s*$")


def parse_share(text: str) -> Decimal | None:
    """`"80%"` -> Decimal("0.8"); None when `text` is no percentage (a size, then).

    `plan --budget 80%` fits under that share of the ledger's own baseline peak: the budget
    a user reaches for first ("a fifth less"), resolved exactly, in bytes, by the replay.
    """
    s = str(text).strip()
    if not s.endswith("%"):
        return None
    m = _SHARE.match(s)
    if m is None:
        raise UnitError(f"cannot read share {text!r}; write e.g. 80% (of the baseline peak)")
    share = Decimal(m.group("num")) / 100
    if share <= 0:
        raise UnitError(f"share {text!r} is no budget; write e.g. 80% (of the baseline peak)")
    return share


def format_bytes(n: int | float, precision: int = 1) -> str:
    """Binary units for people: 1536 -> '1.5 KiB'; exact below 1 KiB ('512 B')."""
    n = int(n)
    sign = "-" if n < 0 else ""
    a = abs(n)
    if a < 1024:
        return f"{sign}{a} B"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if a >= scale:
            return f"{sign}{a / scale:.{precision}f} {unit}"
    raise AssertionError("unreachable")


def format_signed_bytes(n: int) -> str:
    """'+1.5 MiB' / '-512 B' for differences."""
    return ("+" if n >= 0 else "") + format_bytes(n)


def format_percent(fraction: float, signed: bool = False) -> str:
    """A fraction as a percentage with two significant digits, never rounded to a false zero:
    0.0036 -> '0.36%', -0.0036 -> '-0.36%' (not '-0%'), 0.125 -> '12%', 3e-7 -> '0.00003%';
    exactly 0 -> '0%'. `signed` puts '+' before positive values."""
    p = 100.0 * fraction
    if p == 0 or math.isnan(p):
        return "0%" if p == 0 else "n/a"
    decimals = max(0, min(6, 1 - math.floor(math.log10(abs(p)))))
    text = f"{p:.{decimals}f}"
    if float(text) == 0:   # below 0.000001%: say so rather than print zero
        return ("-" if p < 0 else ("+" if signed else "")) + "<0.000001%"
    return ("+" if signed and p > 0 else "") + text + "%"


_DURATION = re.compile(r"^\s*(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>[A-Za-z]+)\s*$")
_SECONDS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}


def parse_duration(text: str) -> float:
    """`"900ms"` -> 0.9, `"1.5s"` -> 1.5, `"250us"` -> 0.00025 (seconds).

    Every `--step-time` (predict, plan, check) and budget file reads durations here. A bare
    number is refused as a bare size is: "0.9" could be seconds or milliseconds.
    """
    s = str(text).strip()
    if s.startswith("-"):
        raise UnitError(f"duration {text!r} is negative; durations are >= 0")
    m = _DURATION.match(s.replace("µs", "us"))
    if m is None:
        if re.fullmatch(r"[0-9.]+", s):
            raise UnitError(f"duration {text!r} has no unit; write {s}s or {s}ms")
        raise UnitError(f"cannot read duration {text!r}; write e.g. 250ms or 1.5s")
    unit = m.group("unit").lower()
    if unit not in _SECONDS:
        raise UnitError(f"unknown unit {m.group('unit')!r} in duration {text!r}; "
                        "use us, ms, s or min")
    return float(m.group("num")) * _SECONDS[unit]


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`count(1, "finding")` -> '1 finding'; `count(3, "finding")` -> '3 findings'."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def format_error(error: float) -> str:
    """A prediction's relative error: `exact`, or signed with two digits (`-0.00049%` for
    8 B of 1.6 MiB, not `-0%`)."""
    return "exact" if error == 0 else format_percent(error, signed=True)
