"""sinabs (tests/clients/train_sinabs.py): SynSense's spiking layers (`LIF`, `IAF`,
`ExpLeak`, the `...Squeeze` forms with time folded into the batch, `LIFRecurrent`), each
keeping its membrane as a buffer it rebinds to the last time step's at the end of every
call, backpropagation through time inside each layer's own loop over the time steps,
surrogate gradients, the states reset between samples (`sinabs.reset_states`,
`sinabs.zero_grad`).

Measured (`tests/clients/harness.py run_client`, the helper hunt53d, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread, 2 steps, batch 4, 6 time steps; ledger
(+ kernel scratch) = allocator, every policy predicted = measured):
- `--mode dense` (the test): 22,476 B; `offload:1` 17,836 B, `offload:@LIF` 15,768 B,
  `offload:*` 15,316 B, `offload:[0-2]+checkpoint:4` 23,968 B, `checkpoint:@Linear`
  40,256 B; `checkpoint:1`, `selective:1`, `selective:@LIF` refused by both (a neuron's
  re-run would start from the membrane its forward left). Before: `offload:1` 18,092 B,
  `offload:@LIF` 16,280 B and `offload:*` 15,572 B predicted (Note [A saved buffer its
  module lets go of], trace/collector.py).
- `--mode conv` (`IAFSqueeze`, `Conv2d`, `AvgPool2d`): 147,812 + 11,644 B of convolution
  scratch = 159,456 B; `offload:*` 169,696 B, `offload:@IAFSqueeze` 157,408 B,
  `checkpoint:@Conv2d` 164,512 B, `selective:@Conv2d` 192,744 B, `checkpoint:[2-3]`
  159,456 B.
- `--mode rec` (`LIFRecurrent`): 17,792 B; `offload:*` 13,932 B,
  `checkpoint:1.rec_connect` 46,768 B, `selective:@Linear` 58,420 B.
- `trace --fake --device cpu` equals the real ledger on all three.
- The doctor finds nothing on the three loops. With the states never reset (`--bug
  noreset`), or reset by the library's `sinabs.reset_states` on `LIFRecurrent`, which it
  passes over (`--mode rec --bug libreset`), step 2's backward fails, and the doctor's
  line names the membranes. Reset never but detached each batch (`--bug detached`), each
  sample starts from the last one's membranes: the doctor is silent (truncated BPTT
  carries its state so, by design).
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, run_client

if importlib.util.find_spec("sinabs") is None:
    pytest.skip("sinabs is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_sinabs_neurons_offloaded_as_measured_and_a_membrane_the_reset_missed():
    """Parameters: Linear 8->16, 16->16, 16->4 (484 floats) and each neuron's `tau_mem`
    and `spike_threshold` (5 floats): 1,956 B. Each LIF's membrane is saved by the next
    call's first time step (`alpha_mem * v_mem`, alpha trained) after the loop reset it in
    place, and the call then rebinds the buffer: measure's offloader takes it off the
    device and the bytes go at the rebind; the replay kept them to its backward, 256 B
    (4 x 16 fp32) a neuron over measured before."""
    pols = {"offload:1": 17_836, "offload:@LIF": 15_768}
    run = run_client("train_sinabs.py", ["--mode", "dense"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 22_476
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak

    # the library's reset passes over a module with children: the recurrent layer's
    # membrane carries step 1's graph into step 2's backward
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / "train_sinabs.py",
                                          ["--mode", "rec", "--bug", "libreset"], 3)
    assert outcome.code == 3 and "backward through the graph a second time" in outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("cross_step_retention", "error")
    assert f.message.startswith("1 buffer of `model` (`model.1.v_mem`) carries autograd "
                                "history across optimizer steps into step 2"), f.message
