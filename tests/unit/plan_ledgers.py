"""Synthetic ledgers for plan's tests: L blocks whose costs and sizes differ, built by hand.

Block i runs forward on events [1+10i, 11+10i): it makes h_i (H[i] bytes, saved by its own
op on the next event) and its output y_i (Y bytes) on its last event; block i+1's first op
saves y_i (a save record at the event before, Rule 5, recorded by block i+1). Backward runs
the blocks in reverse, 10 events each, unpacking h_i and y_{i-1}. One step.

Costs come from a `timing` record (block i's untraced forward: T[i] ns) and a
`calibration` record (checkpoint and offload constants), so that checkpointing is cheap on
some blocks and offloading on others: the optimum mixes kinds at tight budgets.
"""

from __future__ import annotations

from memledger.ledger.model import Ledger

Y = 10_000    # bytes of each block's output

# Block sizes and untraced forward times: checkpoint costs 0.4 T + 500 ns (early stop
# re-runs 4 of 10 events), offload 2,000 + 0.2 H ns (+ 2,000 + 0.2 Y for the block input
# it saves): offload is cheaper on blocks 0, 2, 4, 6, checkpoint on 1, 3, 5, 7.
H8 = [100_000, 300_000, 200_000, 400_000, 150_000, 250_000, 350_000, 50_000]
T8 = [150_000, 20_000, 300_000, 60_000, 200_000, 90_000, 400_000, 30_000]

CALIBRATION = {   # ns; per_byte in ns/byte: a storage of N bytes costs 2,000 + 0.2 N ns
    "ckpt_call_ns": {"median": 500.0, "lo": 400.0, "hi": 600.0},
    "ckpt_save_ns": {"median": 0.0, "lo": 0.0, "hi": 0.0},
    "offload_file_ns": {"median": 2000.0, "lo": 1500.0, "hi": 2500.0},
    "offload_ns_per_byte": {"median": 0.2, "lo": 0.18, "hi": 0.22},
}


def blocks_ledger(H: list[int], T: list[int], timing: dict | None = None) -> Ledger:
    """`timing`: extra keys of the `timing` record (the recompute probe's)."""
    return Ledger.from_records(blocks_records(H, T, timing))


def blocks_records(H: list[int], T: list[int], timing: dict | None = None) -> list[dict]:
    """The records of `blocks_ledger` (a ledger file is one JSON record per line)."""
    L = len(H)
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
            {"k": "phase", "ev": 1, "ph": "forward", "step": 1}]
    B = 1 + 10 * L + 1                     # first backward event
    sid = 0
    frees, allocs = [], []
    for i in range(L):
        e0, e1 = 1 + 10 * i, 11 + 10 * i
        u = B + 10 * (L - 1 - i) + 2       # block i's backward unpacks here
        allocs.append({"k": "alloc", "sid": sid, "ev": e0 + 1, "bytes": H[i], "dev": "cpu",
                       "op": "mul.Tensor", "mod": f"blocks.{i}", "ph": "forward", "step": 1})
        recs += [{"k": "saved", "sid": sid, "ev": e0 + 2, "mod": f"blocks.{i}"},
                 {"k": "unpack", "sid": sid, "ev": u},
                 {"k": "fwdlast", "sid": sid, "last": e0 + 3}]
        frees.append({"k": "free", "sid": sid, "ev": u + 1, "last": u})
        sid += 1
        allocs.append({"k": "alloc", "sid": sid, "ev": e1 - 1, "bytes": Y, "dev": "cpu",
                       "op": "add.Tensor", "mod": f"blocks.{i}", "ph": "forward", "step": 1})
        if i < L - 1:
            un = B + 10 * (L - 2 - i) + 3
            recs += [{"k": "saved", "sid": sid, "ev": e1 - 1, "mod": f"blocks.{i + 1}"},
                     {"k": "unpack", "sid": sid, "ev": un},
                     {"k": "fwdlast", "sid": sid, "last": e1}]
            frees.append({"k": "free", "sid": sid, "ev": un + 1, "last": un})
        else:
            frees.append({"k": "free", "sid": sid, "ev": B, "last": B - 1})
        sid += 1
        recs.append({"k": "scope", "mod": f"blocks.{i}", "cls": "Block", "ev0": e0, "ev1": e1,
                     "ph": "forward", "step": 1, "ns": 10 * T[i]})
    recs += allocs + frees
    recs += [{"k": "phase", "ev": B, "ph": "backward", "step": 1},
             {"k": "step", "step": 1, "ev": B + 10 * L, "ns": 10_000},
             {"k": "timing", "device": "cpu", "clock": "thread_cpu",
              "modules": [[[f"blocks.{i}", T[i]] for i in range(L)]], "ops": [],
              **(timing or {})},
             {"k": "calibration", "device": "cpu", "params": CALIBRATION},
             {"k": "end", "ev": B + 10 * L + 1, "status": "ok"}]
    return recs


def identical_blocks(L: int) -> Ledger:
    """L identical blocks (H8[0], T8[0] each): the hardest case for the DP's front (every
    mix with the same counts ties) and the shape of a deep transformer."""
    return blocks_ledger([H8[0]] * L, [T8[0]] * L)
