"""A re-run of a call that set its module's parameters up in place, once. No torch.

# Note [A set-up on the first call]
A module may initialise its parameters from the first batch it sees, inside its forward:
FrEIA's `ActNorm` (an `init_on_next_batch` flag, set at construction) writes its `scale`
and `bias` through `.data` from the batch's statistics (`self.scale.data.view(-1)[:] =
torch.log(1 / data.std(...))`, then `data * self.scale.exp()` for the bias), clears the
flag, and goes on as every later call does. It runs that set-up under gradients, so its
ops save tensors for a graph nobody reads (`scale.exp()`, 12 B on a 3-channel image).
A checkpoint's re-run of that first call in backward finds the flag cleared, skips the
set-up and saves fewer tensors than the forward did: torch's checkpoint refuses ("A
different number of tensors was saved during the original forward and recomputation").
measure said so in its generic line ("the region's forward depends on state outside its
arguments ..."), while predict priced the policy (tests/clients/train_freia.py --model
glow, `checkpoint:module_list.0`: 837,480 B predicted against a refusal).

Parameters are not state the replay refuses for (Note [State a re-run writes again],
replay/stateful.py: peft adds a LoRA delta into a weight in place and takes it out again
in every call, which a re-run repeats). What tells a set-up apart is the call after it:
predict refuses a re-run call (checkpoint or selective, re-run by a backward: Note [A
call no backward reads is never re-run]) whose forward wrote a parameter in place before
its last save (the trace's `mutated` records of parameters, the first write of each step)
where the region's next call wrote none and saved another number of tensors: the re-run
takes the next call's path. Not refused: a set-up that saves nothing (a lazy module's
`reset_parameters` under no_grad, nflows' ActNorm, which initialises under no_grad): the
re-run saves what the forward saved, torch's checkpoint runs it, and it computes with
the parameters the set-up left, as the forward did after the set-up; a write made again
by the next call (peft's). A trace of one call of the region has no next call to tell a
set-up from a write made on every call: priced, as before (measure refuses it). measure
takes the digests of the region's parameters as its first checkpointed call begins and,
where torch's checkpoint refuses the re-run of that call, names the first parameter, by
name, whose digest moved by the time its re-run started, in the same line (measure/
apply.py `rerun_refusal`). The fix the line gives: run one forward of a batch under
`torch.no_grad()` before training (the set-up then saves nothing, and every training call
takes one path), or offload that module.
"""

from __future__ import annotations

import numpy as np

from memledger.replay.calls import which_call


def first_call_setup_message(policy_text: str, module: str, name: str) -> str:
    """One line: a re-run region whose forward call set a parameter up in place once
    (Note [A set-up on the first call]); predict and measure both say it."""
    return (f"{policy_text} would re-run {module}, whose forward call wrote its parameter "
            f"{name} in place (a set-up on the first batch: ActNorm's data-dependent "
            "initialisation), so the re-run, starting from what that call left, would "
            "take another path than its forward and save other tensors, which torch's "
            "checkpoint refuses; run one forward of a batch under torch.no_grad() before "
            "training, or offload that module instead")


def setup_calls(write_ev: np.ndarray, mods: np.ndarray, ev0: np.ndarray, ev1: np.ndarray,
                rerun: np.ndarray, saves: np.ndarray, stop: np.ndarray,
                n_events: int) -> list[tuple[int, int]]:
    """(call, write) per parameter write (`write_ev`) inside a selected call that is re-run
    (`rerun`), before its last save (`stop`), whose region's next call wrote no parameter
    and made another number of saves (`saves`): Note [A set-up on the first call]."""
    if not len(write_ev) or not rerun.any():
        return []
    k = which_call(ev0, ev1, write_ev, n_events)
    writers = set(k[k >= 0].tolist())
    out = []
    for j in np.flatnonzero(k >= 0).tolist():
        c = int(k[j])
        if not rerun[c] or write_ev[j] >= stop[c]:
            continue
        later = np.flatnonzero((mods == mods[c]) & (ev0 > ev0[c]))
        if not len(later):
            continue   # one call: a set-up and a write of every call look alike
        nxt = int(later[np.argmin(ev0[later])])
        if nxt not in writers and saves[nxt] != saves[c]:
            out.append((c, j))
    return out
