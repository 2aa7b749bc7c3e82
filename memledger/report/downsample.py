"""Downsampling a live-bytes curve for drawing, without losing the peak.

# Note [Downsampling keeps the per-bucket maximum]
A million events do not fit on a screen of ~1,500 pixels, and a plot library that averages
or strides would hide the very thing a memory picture is for: the peak. We cut the events
into equal buckets and keep, from each bucket, the *one event* whose total live bytes is
highest (per-bucket argmax of the total). Every category is read at that same event, so the
stacked areas still add up to a real total that happened. The global peak is the maximum of
its bucket, so it always survives. Example: totals [1, 5, 2, 2, 9, 3] in buckets of 2 keep
events [1, 2, 4] with totals [5, 2, 9] (ties keep the first event).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def bucket_argmax(total: np.ndarray, max_points: int) -> np.ndarray:
    """Event indices to keep: all when they fit, else the argmax of each bucket."""
    n = len(total)
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points!r}")
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    size = -(-n // max_points)                      # ceil(n / max_points) events per bucket
    n_buckets = -(-n // size)
    padded = np.full(n_buckets * size, np.iinfo(np.int64).min, dtype=np.int64)
    padded[:n] = total
    idx = padded.reshape(n_buckets, size).argmax(axis=1)    # first max in each bucket
    return idx + np.arange(n_buckets, dtype=np.int64) * size


def downsample(by_category: pd.DataFrame, max_points: int) -> tuple[np.ndarray, pd.DataFrame]:
    """(kept event indices, the category columns at those events). See Note above."""
    total = by_category.sum(axis=1).to_numpy(dtype=np.int64)
    keep = bucket_argmax(total, max_points)
    return keep, by_category.iloc[keep].reset_index(drop=True)
