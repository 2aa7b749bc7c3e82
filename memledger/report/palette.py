"""One colour per category and per phase, shared by the terminal timeline and the HTML report,
so a picture in a pull request and one in a terminal read the same way."""

from __future__ import annotations

# Category -> (hex for HTML, Rich style for the terminal). Resident-by-design categories are
# cool colours, per-step memory warm ones, unexplained bytes grey.
CATEGORY_COLORS: dict[str, tuple[str, str]] = {
    "parameter": ("#4c78a8", "blue"),
    "buffer": ("#72b7b2", "cyan"),
    "gradient": ("#eeca3b", "yellow"),
    "optimizer_state": ("#b279a2", "magenta"),
    "activation": ("#e45756", "red"),
    "temporary": ("#54a24b", "green"),
    "input": ("#9d755d", "bright_white"),
    "workspace": ("#bab0ac", "grey50"),
    "other": ("#79706e", "grey62"),
    "communication": ("#f58518", "dark_orange"),
}

# Phase -> (band fill for HTML, Rich style, one-letter mark for the terminal strip).
PHASE_STYLES: dict[str, tuple[str, str, str]] = {
    "setup": ("#f2f2f2", "grey50", "s"),
    "forward": ("#e3eefa", "blue", "F"),
    "loss": ("#fbe9d0", "yellow", "L"),
    "backward": ("#fadede", "red", "B"),
    "optimizer": ("#efe3f3", "magenta", "O"),
    "zero_grad": ("#eeeeee", "grey62", "z"),
    "other": ("#f7f7f7", "grey50", "·"),
}


def category_hex(cat: str) -> str:
    return CATEGORY_COLORS.get(cat, ("#999999", "white"))[0]


def category_style(cat: str) -> str:
    return CATEGORY_COLORS.get(cat, ("#999999", "white"))[1]


def phase_style(phase: str) -> tuple[str, str, str]:
    return PHASE_STYLES.get(phase, ("#ffffff", "white", "?"))
