"""x-unet (tests/clients/train_xunet.py): lucidrains' `XUnet` from its README's config
(`dim=8`, `dim_mults=(1, 2)`, `nested_unet_depths=(2, 1)`, `consolidate_upsample_fmaps`,
`weight_standardize`, a TransformerBlock in the lower stage), trained as a denoiser with
a plain Adam loop on random tensors. Every conv is a Conv3d (an image is a 1-frame video).

Measured (`tests/clients/harness.py run_client`, the helper hunt45e, 2026-12-06, torch
2.13.0 CPU, 1 step):
- `--size 16` (2-D): the ledger 996,180 B, the allocator 1,253,004 B: 256,824 B of kernel
  scratch (CPU Conv3d's unfolded columns, measured per op), `peak_with_scratch` equal to
  the allocator; `checkpoint:downs.*.0` 1,091,372 B, `selective:downs.*.0` 1,117,996 B,
  `offload:downs.*.0` 1,071,020 B, `checkpoint:mid` 1,207,820 B, `checkpoint:ups.0.0`
  1,201,676 B, `checkpoint:*.block2.downs.*` (the nested unets' inner down lists)
  1,229,452 B, predicted and measured. `checkpoint:downs.*` is refused by both (a
  ModuleList: no forward of its own). `memledger plan --budget 90%` searched
  `downs.*.0` alone (the stage ResnetBlocks under the uncalled stage lists: 2 blocks, 4
  options, 16 assignments) and picked `offload:downs.0.0`; with the stacks beside them and
  the stages' other parts (the lead's merge of hunt45b and hunt45e) it searches 8 blocks,
  65,536 assignments, and picks `offload:consolidator.fmap_convs.*`.
- `--xattnres --size 16`: 1,132,612 B, 1,389,436 B with the scratch;
  `selective:downs.*.0+offload:mid_after` 1,203,164 B and `offload:down_xattnres.*`
  1,358,716 B both sides; checkpoint or selective of any `XAttnRes` is refused by both
  (Note [A list changed after the call]).
- `--video --size 8` (`frame_kernel_size=3`, 2 frames): 1,214,216 B, 1,492,876 B with the
  scratch; `checkpoint:downs.*.0.block2.downs.*` 1,478,380 B both sides.
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("x_unet") is None:
    pytest.skip("x-unet is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # exact kernel scratch


def test_a_list_appended_to_after_the_call_is_refused_by_both_and_plan_finds_the_stacks():
    """`XUnet(use_xattnres=True)` hands each cross-stage attention residual the `history`
    list of the stage outputs so far, then appends to that same list. Re-run in backward,
    `down_xattnres.1` (handed one entry) found four and x-unet's assertion failed: predict
    priced `checkpoint:down_xattnres.*` while measure ended with the script's
    AssertionError "history must have 1 entries, but received 4" (exit 3). Now both refuse
    it in one line, naming the call backward re-runs first (Note [A list changed after the
    call], trace/outside_state.py).

    `plan` searched `downs.*.0` alone (each stage a ModuleList that never runs; the stacks
    beside such a group were never looked for) and said no candidate fits 1,100,000 B, the
    lowest `offload:downs.*.0` at 1,207,452 B; it now adds the consolidator's ResnetBlocks
    and the up stage (Note [Stacks beside the blocks], replay/plan.py), and its mixes are
    predicted as measured."""
    from memledger.replay.plan import plan

    mix = "offload:downs.0.0+offload:consolidator.fmap_convs.*"
    run = run_client("train_xunet.py", ["--xattnres", "--size", "16"],
                     ["checkpoint:down_xattnres.*", mix], steps=1)
    # 256,824 B of kernel scratch (CPU Conv3d's unfolded columns), measured per op
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 1_389_436
    assert run.ledger_peak == 1_132_612
    changed = [r for r in run.ledger.extra["stateful"] if r["obj"] == "<argument changed>"]
    # each is handed `history`, appended to after each stage (the up stage's too)
    assert [r["mod"] for r in changed] == ["down_xattnres.0", "down_xattnres.1",
                                          "mid_xattnres", "up_xattnres.0"]
    xr = run.policies["checkpoint:down_xattnres.*"]
    assert xr.predicted is None and xr.measured is None
    assert xr.predict_refusal == xr.measure_refusal
    assert xr.predict_refusal.startswith(
        "memledger: checkpoint:down_xattnres.* would re-run down_xattnres.1, which is "
        "handed a list (or dict) that the script changes after the call returns")
    assert (run.policies[mix].predicted, run.policies[mix].measured) == (1_080_700, 1_080_700)
    rep = plan(run.ledger, 1_100_000)
    # and the stages' downsamples, the other called parts of the same uncalled items (Note
    # [Items called in parts], replay/plan.py)
    assert rep.blocks == ["downs.0.0", "downs.1.0", "consolidator.fmap_convs.0",
                          "consolidator.fmap_convs.1", "ups.0.0", "ups.0.3", "downs.0.3",
                          "downs.1.3"]
    # which mix is cheapest in time depends on the traced times; that one fits does not
    assert rep.fits and rep.predicted_peak_bytes <= 1_100_000
