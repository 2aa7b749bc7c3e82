"""Trace a script for real, then fake, in this process; print the peaks and every category
that differs at the peak (docs/fake.md, "code nobody here wrote").

    python tools/fake_vs_real.py tests/clients/train_zoo.py --model llama-dora --steps 2
    RESULT train_zoo --model llama-dora --steps 2  real 939468  fake 939452  diff -16  {'other': -16}

The ledgers stay beside the system's temporary directory (`fake-vs-real/`), for `memledger
show` / `predict` on both.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import memledger
from memledger.ledger.model import Ledger
from memledger.trace.script import run_script


def main(argv: list[str]) -> int:
    script, args = Path(argv[0]), argv[1:]
    out_dir = Path(tempfile.gettempdir()) / "fake-vs-real"
    out_dir.mkdir(exist_ok=True)
    tag = "_".join(a.strip("-") for a in args)[:60]
    peaks = {}
    for fake in (False, True):
        out = out_dir / f"{script.stem}_{tag}_{'fake' if fake else 'real'}.ledger"
        saved_argv, saved_path = list(sys.argv), list(sys.path)   # run_script sets both
        try:
            with memledger.trace(out, fake=fake):
                run_script(script, args)
        finally:
            sys.argv[:], sys.path[:] = saved_argv, saved_path
        led = Ledger.load(out)
        peaks[fake] = (led.peak().bytes, led.at_peak())
    (real, real_at), (fake, fake_at) = peaks[False], peaks[True]
    diff = {k: fake_at.get(k, 0) - real_at.get(k, 0) for k in sorted(set(real_at) | set(fake_at))
            if fake_at.get(k, 0) != real_at.get(k, 0)}
    print(f"RESULT {script.stem} {' '.join(args)}  real {real}  fake {fake}  "
          f"diff {fake - real}  {diff}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
