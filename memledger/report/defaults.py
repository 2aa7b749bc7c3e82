"""Defaults the CLI shows in `--help`, kept apart from the reporters so that building the help
text imports no numpy or pandas."""

from __future__ import annotations

MAX_POINTS = 2000   # kept events on the HTML curve; ~1.5 points per pixel of a wide screen
