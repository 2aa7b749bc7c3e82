"""FrEIA 0.2 (tests/clients/train_freia.py): invertible networks built as its README
builds them (`Ff.SequenceINN` with `append`, `Ff.GraphINN` from nodes with a
`ConditionNode`), subnets written by the script, trained by maximum likelihood on the
log-Jacobian-determinant the network returns beside its output; the inverse pass
(`rev=True`) in the loss as a cycle or a sampling term.

Measured (`tests/clients/harness.py run_client`, the helper hunt57a, 2026-12-08, torch
2.13.0 CPU, OMP_NUM_THREADS=1, AMD Zen 4; ledger + kernel scratch = allocator and `--fake
--device cpu` = the real ledger everywhere; every policy predicted = measured but where
said):
- `--model toy` (SequenceINN of 2 AllInOneBlocks, 2-D data; 2 steps): 4,580 B;
  `checkpoint:module_list.*` 18,432 B (three CPU RNG states of 5,056 B: the two frames and
  the re-run's fork), `offload:module_list.*` 3,900 B, `offload:module_list.0.subnet`
  4,068 B; `selective:*` refused alike (AllInOneBlock scales its subnet's output in place,
  `a *= 0.1`). With `--cycle --sample --accum 2 --sgd --clip`: 8,088 B, six policies.
- `--model glow` (ActNorm, GLOW couplings, PermuteRandom, IRevNetDownsampling, RNVP after a
  Flatten; 2 steps): 787,316 B + 45,120 B of kernel scratch; `checkpoint:module_list.0`
  (ActNorm) refused by both sides in one line (Note [A set-up on the first call],
  replay/first_call.py: predict priced it at 837,480 B before); `offload:module_list.*`
  692,640 B, `checkpoint:@GLOWCouplingBlock` 754,484 B.
- `--model graph --concat --clip 1` (Haar downsampling, couplings, a Split whose halves
  leave through Flatten and a Concat1d, conditional AllInOneBlocks; 2 steps): 618,936 +
  10,752 B; seven policies. `--concat` is not pinned: FrEIA orders the graph's nodes by
  iterating a set, so `module_list.k` names another node in another process (a
  `checkpoint:module_list.5+checkpoint:module_list.6` read 620,376 B in one run and
  612,312 in another); the default, two OutputNodes, orders them alike every time.
  With `--cycle`, `checkpoint:module_list.0` (HaarDownsampling, whose inverse scales its
  input in place) is refused by both (measure said "the script failed" before: Note [A
  refusal a library wrapped], trace/script.py).
- `--model glow --blocks 1 --width 8 --cycle 0.5` (or `--sample 0.1`): 436,432 +
  39,932 B; `checkpoint:module_list.2` (a PermuteRandom, its index a parameter over
  numpy's memory) 498,764 B, predicted 476,364 before (Note [Model state over memory torch
  did not allocate], replay/prepared.py), `checkpoint:module_list.7` 487,564 (476,364).
The doctor finds nothing on the loops; `--bug stale` (no zero_grad) is `grad_leak`,
`--bug clip-after-step` is `clip_order` (at the clip after the step).
"""

import importlib.util

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, fake_client_gaps,
                                   run_client)

if importlib.util.find_spec("FrEIA") is None:
    pytest.skip("FrEIA is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

SMALL = ["--blocks", "1", "--width", "8"]


@pytest.mark.slow
def test_glow_chain_with_actnorm_init_is_refused_alike_and_couplings_predicted():
    """ActNorm initialises `scale` and `bias` from the first batch inside its forward,
    under gradients: a checkpoint's re-run of that call skips the set-up and saves fewer
    tensors, which torch's checkpoint refuses. predict priced `checkpoint:module_list.0`
    while measure refused it; both say the set-up's line now."""
    argv = ["--model", "glow", *SMALL]
    pols = {"checkpoint:@GLOWCouplingBlock": 309_124, "offload:module_list.*": 268_368,
            "selective:@GLOWCouplingBlock": 309_124}
    run = run_client("train_freia.py", argv, ["checkpoint:module_list.0", *pols])
    assert run.ledger_peak == 275_604
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=304_068)
    act = run.policies["checkpoint:module_list.0"]
    assert act.predict_refusal == act.measure_refusal
    assert "wrote its parameter module_list.0.bias in place (a set-up on the first batch" \
        in act.predict_refusal
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)


@pytest.mark.slow
def test_graph_inn_with_an_inverse_pass_refuses_a_haar_re_run_in_one_line():
    """GraphINN runs each node inside `try:` and raises its own RuntimeError `from` the
    node's error; measure's refusal of HaarDownsampling (its inverse, run by the cycle
    term, scales its input in place) read "the script failed ... Node 'haar' ... encountered
    an error." (exit 3) while predict refused it in one line."""
    argv = ["--model", "graph", "--cycle", "0.5", *SMALL]
    pols = {"checkpoint:@GLOWCouplingBlock": 310_072, "offload:module_list.*": 252_976}
    run = run_client("train_freia.py", argv, ["checkpoint:module_list.0", *pols])
    assert run.ledger_peak == 337_872
    assert_pinned(run.allocator_peak, amd_bf16=337_872)
    haar = run.policies["checkpoint:module_list.0"]
    assert haar.predict_refusal == haar.measure_refusal
    assert "whose forward changes the tensor it is handed in place" in haar.predict_refusal
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)
    assert fake_client_gaps("train_freia.py", argv, list(pols)) == {}


@pytest.mark.slow
def test_toy_density_doctor_finds_nothing_and_a_stale_gradient():
    """SequenceINN of AllInOneBlocks on the 2-D density: nothing on the loop with
    accumulation and clipping; `--bug stale` (zero_grad never called) is `grad_leak`, at
    the backward; `--bug clip-after-step` is `clip_order`, at the late clip."""
    assert_one_doctor_error("train_freia.py", ["--model", "toy", "--accum", "2",
                                               "--clip", "1.0"], 3, None, "")
    assert_one_doctor_error("train_freia.py", ["--model", "toy", "--bug", "stale"], 3,
                            "grad_leak",
                            "(loss / args.accum if args.accum > 1 else loss).backward()")
    assert_one_doctor_error("train_freia.py", ["--model", "toy", "--clip", "1.0", "--bug",
                                               "clip-after-step"], 3, "clip_order",
                            "torch.nn.utils.clip_grad_norm_(params, args.clip)")


@pytest.mark.slow
def test_permutations_whose_index_is_numpys_memory_hold_their_frames_to_backward():
    """PermuteRandom keeps its permutation as `nn.Parameter(torch.LongTensor(perm))` of a
    numpy array (external memory), the only tensor its forward saves; the replay dropped
    that save with the storage and let each checkpoint frame go as its call ended. With
    the inverse pass in the loss the forward's frames are live at the peak (11,200 B each:
    an RNG state and the (8, 192) fp32 argument)."""
    argv = ["--model", "glow", "--cycle", "0.5", *SMALL]
    pols = {"checkpoint:module_list.2": 498_764, "checkpoint:module_list.7": 487_564}
    run = run_client("train_freia.py", argv, list(pols))
    assert run.ledger_peak == 436_432
    assert_pinned(run.allocator_peak, amd_bf16=476_364)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured, policy
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)
