"""What `plan` may do with one block: the options, including op-level selective save lists.

No torch. Options per block, in this order:

    none | checkpoint | offload | selective (default save list) | selective:save=<ranked>

# Note [Op-level selective: keep what is dear to recompute]
Inside a block, each op kind (aten overload packet) whose outputs the block saves has two
numbers: the bytes checkpointing would drop (its saved outputs) and the untraced time to
make them again (its ops' times, memledger/replay/timings.py). Keeping an op's outputs
costs its bytes and saves its recompute, so op kinds are ranked by bytes per second of
recompute, lowest first: the cheapest bytes to keep. The k-th ranked save list keeps the
first k kinds (k = 1..SAVE_LISTS = 2). Example (tiny GPT block, this machine): `addmm` keeps
1.5 MiB for 1.1 ms of recompute (1.4 GB/s), `bmm` 0.75 MiB for 0.3 ms (2.6 GB/s), `gelu`
1 MiB for 0.2 ms (5.2 GB/s): save lists `addmm` and `addmm,bmm`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memledger.replay.policies import DEFAULT_SAVE_OPS, is_op_kind
from memledger.replay.prepared import ACTIVATION, Prepared

SAVE_LISTS = 2     # ranked save lists offered per block (beside the default one)


@dataclass(frozen=True)
class Option:
    kind: str                       # none | checkpoint | offload | selective
    save: tuple[str, ...] = ()      # selective: the op kinds kept

    def part(self, selector: str) -> str:
        if self.kind == "none":
            return ""
        if self.kind == "selective" and self.save != DEFAULT_SAVE_OPS:
            return f"selective:{selector}:save={','.join(self.save)}"
        return f"{self.kind}:{selector}"

    def label(self) -> str:
        if self.kind == "selective":
            return "selective" if self.save == DEFAULT_SAVE_OPS else \
                f"selective[{','.join(self.save)}]"
        return self.kind


def op_ranking(prep: Prepared, blocks: list[str]) -> list[tuple[str, int, float]]:
    """(op kind, saved bytes, untraced recompute ns) per op kind the blocks' calls save,
    lowest bytes per second first (Note [Op-level selective]). One ranking for all the
    blocks, so that every block is offered the same save lists."""
    calls = np.flatnonzero(np.isin(prep.scope_mod, blocks))
    if not len(calls):
        return []
    calls = calls[np.argsort(prep.scope_ev0[calls], kind="stable")]
    ev0, ev1 = prep.scope_ev0[calls], prep.scope_ev1[calls]
    cr = prep.created
    k = np.searchsorted(ev0, cr, side="right") - 1
    inside = (k >= 0) & (cr < ev1[np.maximum(k, 0)]) & (prep.cat == ACTIVATION)
    t = prep.timings
    op_ns = np.where(np.isnan(t.op_ns), 0.0, t.op_ns)
    out = []
    for code in np.unique(prep.op_code[inside]):
        rows = inside & (prep.op_code == code)
        name = str(prep.op_names[code])
        ns = float(op_ns[np.unique(cr[rows])].sum())
        out.append((name, int(prep.nbytes[rows].sum()), ns))
    return sorted(out, key=lambda r: (r[1] / r[2] if r[2] > 0 else np.inf, r[0]))


def block_options(prep: Prepared, blocks: list[str]) -> list[Option]:
    opts = [Option("none"), Option("checkpoint"), Option("offload"),
            Option("selective", DEFAULT_SAVE_OPS)]
    # a save list names op kinds: a saved wrapped number (op `(wrapped number)`, trace/
    # scalars.py) is no op's output, and `plan` once offered `save=(wrapped number)`
    ranked = [name for name, _, ns in op_ranking(prep, blocks) if ns > 0 and is_op_kind(name)]
    for k in range(1, min(SAVE_LISTS, len(ranked)) + 1):
        o = Option("selective", tuple(sorted(ranked[:k])))
        if o not in opts:
            opts.append(o)
    return opts
