"""Predicted vs measured peak on models drawn at random (tests/clients/train_random.py).

    .venv/bin/python benchmarks/random_models.py --seeds 0-39
    .venv/bin/python benchmarks/random_models.py --seeds 7 --minimise "selective:blocks.*"
    .venv/bin/python benchmarks/random_models.py --menu wide --seeds 0-39
    .venv/bin/python benchmarks/random_models.py --fake --seeds 0-39
    .venv/bin/python benchmarks/random_models.py --menu deep --loop="--accum 2 --amp"

Each seed draws a model whose blocks run a random sequence of the mechanics that decide
what autograd saves and when storages go; the tier's harness (tests/clients/harness.py,
the ledger and allocator passes, predict, and the measure worker, in this process) runs
it under each policy. A row says OK when the ledger (with its kernel scratch) equals the
allocator and every policy's prediction equals its measurement, else what differs.
`--minimise POLICY` shrinks a failing draw op by op, keeping a gap of the same sign, and
prints the smallest `--program` that still shows it (a test case to write). `--fake` sets
the fake ledger (`trace --fake --device cpu`) beside the real one instead: peaks, categories
at the peak and every policy's prediction must agree.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.clients.harness import client_gaps, fake_client_gaps  # noqa: E402
from tests.clients.train_random import MENUS, draw  # noqa: E402  (argparse: as a script)


POLICIES = ["checkpoint:blocks.*", "checkpoint:blocks.0", "selective:blocks.*",
            "offload:blocks.*", "checkpoint:blocks.0+offload:blocks.[1-2]"]


def program_of(seed: int, menu: str) -> str:
    """The draw of `seed` from `menu` (train_random.py MENUS), as a `--program`."""
    blocks, between = draw(seed, menu=menu)
    return ";".join(f"{b}/{' '.join(ops)}" for ops, b in zip(blocks, between))


def gaps(seed: int, program: str, policies: list[str],
         loop: tuple[str, ...] = ()) -> dict[str, int | str]:
    """Per policy (and "ledger"), predicted - measured where they differ. `loop`: the
    script's training-loop options (`--accum 2`, `--amp`)."""
    return client_gaps("train_random.py", ["--seed", str(seed), "--steps", "3", "--program",
                                           program, *loop], policies)


def fake_gaps(seed: int, program: str, policies: list[str],
              loop: tuple[str, ...] = ()) -> dict[str, int | str]:
    """`--fake`: the fake ledger (target cpu) against the real one of the same draw."""
    return fake_client_gaps("train_random.py", ["--seed", str(seed), "--steps", "3",
                                                "--program", program, *loop], policies)


def minimise(seed: int, policy: str, menu: str, gaps=gaps) -> str:
    program = program_of(seed, menu)
    start = gaps(seed, program, [policy]).get(policy)
    if not isinstance(start, int):
        return f"seed {seed}: no gap under {policy}"
    parts = [[b, ops.split()] for b, ops in (p.split("/") for p in program.split(";"))]

    def text(ps) -> str:
        return ";".join(f"{b}/{' '.join(o)}" for b, o in ps)

    def same(ps) -> bool:
        try:
            d = gaps(seed, text(ps), [policy]).get(policy)
        except AssertionError:   # the shrunk script failed untraced
            return False
        return isinstance(d, int) and (d > 0) == (start > 0)

    changed = True
    while changed:
        changed = False
        for i in range(len(parts)):
            if parts[i][0] != "none":
                trial = [[b, list(o)] for b, o in parts]
                trial[i][0] = "none"
                if same(trial):
                    parts, changed = trial, True
            j = 0
            while j < len(parts[i][1]):
                trial = [[b, list(o)] for b, o in parts]
                del trial[i][1][j]
                if same(trial):
                    parts, changed = trial, True
                else:
                    j += 1
    return f"seed {seed} {policy}: {start:+,} B; smallest: --program {text(parts)!r}"


def _seeds(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0-19")
    ap.add_argument("--minimise", metavar="POLICY", default="")
    ap.add_argument("--menu", default="basic", choices=list(MENUS))
    ap.add_argument("--fake", action="store_true",
                    help="the fake ledger (and its predictions) against the real one")
    ap.add_argument("--loop", default="", help="the training loop's options, passed to the "
                    "script: '--accum 2' (micro-batches per step), '--amp' (bf16 autocast "
                    "around forward and loss)")
    a = ap.parse_args()
    loop = tuple(a.loop.split())
    judge = functools.partial(fake_gaps if a.fake else gaps, loop=loop)
    if a.minimise:
        for s in _seeds(a.seeds):
            print(minimise(s, a.minimise, a.menu, judge), flush=True)
        return
    bad = 0
    print("| seed | program | result |\n|---|---|---|")
    for s in _seeds(a.seeds):
        program = program_of(s, a.menu)
        g = judge(s, program, POLICIES)
        bad += bool(g)
        res = "OK" if not g else "; ".join(f"{k} {v:+,} B" if isinstance(v, int) else
                                           f"{k} {v}" for k, v in g.items())
        print(f"| {s} | `{program}` | {res} |", flush=True)
    print(f"\n{len(_seeds(a.seeds)) - bad} of {len(_seeds(a.seeds))} draws exact")


if __name__ == "__main__":
    main()
