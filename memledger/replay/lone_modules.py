"""The modules `plan` searches beside the repeated blocks. No torch.

    saved = saves_counter(led, prep)        # bytes the calls of some paths save
    lone_modules(led, prep, blocks)         # ['tokenizer'], in the order they first run

# Note [Modules that are not blocks]
`plan` searched the repeated blocks only (numbered children of a module list, Note [Stacks
beside the blocks] in replay/plan.py). A large module that is no such block was never
offered: charformer-pytorch's GBST tokenizer runs ahead of a two-layer
`nn.TransformerEncoder` and saves 63 % of what the model's calls save
(tests/clients/train_charformer.py --mode mlm --mask --blocks offsets, 2 steps: 172,984
of 274,600 B); `offload:tokenizer` is predicted and measured 363,896 B of a 451,348 B
baseline, lower than any choice on the encoder's layers (408,340 B), and `plan --budget
80%` said "no candidate fits; the lowest predicted peak is 408,340 bytes". A stem or an
embedding ahead of the blocks, a head after them, the module between an encoder's and a
decoder's lists, and a model with no list at all are the same shape.

The rule: a module is searched beside the blocks, as a unit of its own with the blocks'
options (none, checkpoint, offload, selective with the default save list and the ranked
lists), where
1. the model calls it (its path is not empty: the model itself is no module a policy
   selects) and it is neither a repeated block (those left out of the search too) nor
   holds one nor sits inside one: a block's options already act on it, or it acts on a
   block's;
2. it is outermost among such modules: no module it sits inside passes rule 1 (a module
   inside the tokenizer moves a part of what the tokenizer's options move, and two
   modules one inside the other do not add up, Note [Blocks add up]; the encoder that
   holds the blocks fails rule 1, so its final norm is outermost);
3. its calls save at least 1 / MODULE_SHARE of what the model's calls save, and, where
   blocks are searched, at least what the one that saves least saves, counted as the
   replay counts them (`packs_of`, the same count as Note [A block's saves, by its
   calls]): smaller ones cannot move the peak by much, and each module searched
   multiplies the exhaustive search by the options (6 on a transformer). At most
   MODULE_SHARE modules pass it: the outermost modules are disjoint, so their saves are;
4. it saves no storage that a block or another such module saves too (`searched`,
   replay/plan.py). Searched in one unit with them (Note [Blocks that share a save]) it
   would take their option: UNet2DModel's `mid_block`, between the down and the up
   blocks, holds what the skip connections join to them, so the five were one unit and
   plan's answer at 80 % of the baseline (tests/clients/test_diffusers_clients.py) became
   `offload:up_blocks.*+offload:down_blocks.*+offload:mid_block` where offloading the
   blocks alone fits at less added time. Left out, the search is the one before, no worse.
The charformer model: `encoder` holds the blocks; `tokenizer` (63 %) and `head` (5.6 %)
are outermost; the tokenizer is searched, the head is not. The second bar of rule 3 keeps
out a shallow model's head: two MLP blocks and a Linear head (tests/clients/
train_plan_saves.py --case identity) save 16,384 and 20,480 B, the head its input, 4,096
B, a tenth of 40,960. A 48-block tiny GPT (each block about 2 % of the saves, the head a
block's input once) gets none, and its search is unchanged. A stem whose last ReLU output
the first block's first Linear saves again is not searched (rule 4). The full replay of
plan's answer checks the sum as for blocks. A policy selects a module by its own path
(`offload:tokenizer`), a plain selector that matches that module only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from memledger.ledger.model import Ledger
from memledger.replay.engine import packs_of
from memledger.replay.prepared import ACTIVATION, Prepared, model_calls, prepared_of

MODULE_SHARE = 10   # a module beside the blocks saves >= 1/10 of the model's saves


def saves_counter(led: Ledger, prep: Prepared | None) -> Callable[[Sequence[str]], int]:
    """Bytes of the activations the calls of some module paths save (each storage once),
    as the replay counts them (Note [A block's saves, by its calls], replay/plan.py); a
    ledger without save records: the activations saved by modules at or under the paths."""
    kept: dict[tuple[str, ...], int] = {}
    sv = led.saves
    if sv is not None and len(sv):
        prep = prep or prepared_of(led)

        def count(key: tuple[str, ...]) -> int:
            rows = np.unique(prep.pack_row[packs_of(prep, list(key))]) \
                if prep.pack_row is not None else np.zeros(0, dtype=np.int64)
            rows = rows[prep.cat[rows] == ACTIVATION]
            return int(prep.nbytes[rows].sum())
    else:
        st = led.storages   # a carried activation too (Note [A state carried into the next step])
        saved = st[(st["category"] == "activation") | (st["cat_before"] == "activation")
                   if "cat_before" in st else st["category"] == "activation"]
        mods = saved["saved_module"].astype(str)

        def count(key: tuple[str, ...]) -> int:
            under = np.zeros(len(saved), dtype=bool)
            for m in key:
                under |= (mods == m).to_numpy() | mods.str.startswith(m + ".").to_numpy()
            return int(saved.loc[under, "bytes"].sum())

    def saved_bytes(paths: Sequence[str]) -> int:
        key = tuple(paths)
        if key not in kept:
            kept[key] = count(key)
        return kept[key]
    return saved_bytes


def lone_modules(led: Ledger, prep: Prepared | None, blocks: Sequence[str],
                 left_out: Sequence[str] = ()) -> list[str]:
    """The modules searched beside `blocks` (the repeated blocks searched; `left_out`: those
    that are not), in the order of their first call (Note [Modules that are not blocks])."""
    sc = led.scopes
    if not len(sc):
        return []
    sc = sc[model_calls(sc, led)]
    first: dict[str, int] = {}
    for m, e in zip(sc["mod"].astype(str), sc["ev0"].to_numpy(dtype=np.int64).tolist()):
        if m and (m not in first or e < first[m]):
            first[m] = e
    free = {p for p in first if not any(related(p, b) for b in [*blocks, *left_out])}
    outer = [p for p in free if not any(".".join(p.split(".")[:k]) in free
                                        for k in range(1, p.count(".") + 1))]
    if not outer:
        return []
    saved = saves_counter(led, prep)
    total = saved(sorted(first))
    least = min((saved([b]) for b in blocks), default=0)
    out = [p for p in outer
           if (b := saved([p])) > 0 and b * MODULE_SHARE >= total and b >= least]
    return sorted(out, key=lambda p: (first[p], p))


def related(a: str, b: str) -> bool:
    """Is one of the paths the other, or inside it?"""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")
