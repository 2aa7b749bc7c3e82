"""A block that caches its causal mask as a plain attribute on its first call and slices it
in later calls (tests/clients/train_cached_attr.py; CoCa-pytorch's
`ParallelTransformerBlock` does so with `self.mask` and `self.pos_emb`)."""

from tests.clients.harness import run_client


def test_a_cached_mask_ends_each_frame_by_its_own_steps_backward_and_refuses_selective():
    """2 steps. Step 2's call saves the mask step 1 made, so the mask's last unpack is
    step 2's; that unpack ended step 1's checkpoint frame, which held its RNG state
    (5,056 B) and the block's (4, 12, 16) fp32 input (3,072 B) to step 2's backward:
    `checkpoint:1` predicted 129,192 B against 121,064 B measured, `checkpoint:[1-2]`
    136,936 B (Note [A cache a later call saves again], replay/engine.py). And the re-run
    of step 1's call finds the mask and slices it, an op its forward did not run: measure
    refused `selective:[1-2]` while predict predicted 160,744 B (Note [A cache kept as a
    plain attribute]). `--no-cache` (the mask made on every call) is the control: the same
    checkpoint peaks, and selective runs."""
    pols = ["checkpoint:1", "checkpoint:[1-2]", "selective:[1-2]"]
    run = run_client("train_cached_attr.py", [], pols)
    assert run.ledger_peak == run.allocator_peak == 128_232
    for policy in pols[:2]:
        assert run.policies[policy].predicted == run.policies[policy].measured == 121_064
    sel = run.policies["selective:[1-2]"]
    assert sel.predicted is None and sel.measured is None
    assert "kept a tensor on 2 (a plain attribute) that later calls reuse" in \
        sel.predict_refusal
    control = run_client("train_cached_attr.py", ["--no-cache"], ["selective:[1-2]"])
    sel = control.policies["selective:[1-2]"]
    assert sel.predicted == sel.measured == 144_488
