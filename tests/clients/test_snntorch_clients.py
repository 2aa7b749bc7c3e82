"""snntorch (tests/clients/train_snntorch.py): spiking networks trained as its tutorials
do, leaky integrate-and-fire neurons with surrogate gradients, the membrane carried over
the time steps inside the forward (backpropagation through time), rate-coded inputs
(`spikegen.rate`) and snntorch's own losses.

Measured (`tests/clients/harness.py run_client`, the helper hunt42a, 2026-12-06, torch
2.13.0 CPU, one intra-op thread, 2 steps, 5 time steps, batch 8):
- `--mode seq` (tutorial 7: Conv2d, MaxPool2d, `snn.Leaky(init_hidden=True)` in an
  `nn.Sequential`, `utils.reset(net)` per batch, `ce_rate_loss`): the ledger 292,928 B,
  336,208 B with 43,280 B of kernel scratch, equal to the allocator (358,544 B with
  65,616 B on two threads); `offload:[0-2]+checkpoint:[3-4]` 286,532 B,
  `checkpoint:[3-4]` 374,608 B, `selective:[0-1]` 363,280 B, `offload:2` 317,764 B,
  predicted and measured;
  `checkpoint:2` and `selective:2` refused by both in one line (a neuron's re-run would
  read the membrane its last time step left). Before: predict priced `checkpoint:2`
  (378,756 B, two threads) while measure refused it naming the attribute `2.reset`.
- `--mode class` (tutorial 5: `fc1`, `lif1`, `fc2`, `lif2`, the membrane handed to each
  neuron, `mse_count_loss`): 477,808 B both; `checkpoint:lif1` 499,116 B,
  `selective:lif2` 493,932 B, `checkpoint:fc1+offload:fc2` 486,832 B both sides. Before:
  measure refused `checkpoint:lif1` and predict `selective:lif2`, and the neuron's
  re-made membrane read 4 B under measured.
- `--mode class --neuron synaptic`: 482,568 B both; `checkpoint:lif1` 510,016 B,
  `selective:lif2` 499,648 B, `offload:lif1` 476,408 B both sides.
- The doctor finds nothing on either loop. `--bug noreset` (no `utils.reset(net)`) fails
  in step 2's backward ("Trying to backward through the graph a second time"): the doctor
  said only that; now its line names the membranes that carried step 1's graph.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("snntorch") is None:
    pytest.skip("snntorch is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # kernel scratch


def test_a_convolutional_snn_with_hidden_state_in_its_neurons():
    """Tutorial 7's network. Parameters: conv 1->4 (5x5) 104 floats, conv 4->8 808, linear
    8->10 90: 4,008 B; Adam's state twice that and three 4 B step counters... per tensor:
    6 tensors, 24 B. Buffers: each neuron's threshold, graded-spike factor, beta (4 B) and
    reset mechanism (8 B), 60 B, and the membranes of the last time step: 8 x 4 x 6 x 6,
    8 x 8 x 1 x 1 and 8 x 10 floats, 5,184 B.

    A neuron with `init_hidden=True` keeps its membrane as the buffer `mem` and replaces it
    per time step from the one before (`self.mem = beta * self.mem + input_`): a re-run
    would read the last time step's. predict priced `checkpoint:2` (378,756 B) and measure
    refused it naming `2.reset`, a by-product; both now refuse it in the same line (Note [A
    buffer replaced from the one before], trace/collector.py). `selective:2` was refused by
    both with two reasons: predict named the first time step of the first batch (its
    membrane made on another path, the buffer still empty), measure the last, which
    backward re-runs first (Note [The re-run backward meets first], replay/engine.py)."""
    mix = "offload:[0-2]+checkpoint:[3-4]"
    run = run_client("train_snntorch.py", ["--mode", "seq"], ["checkpoint:2", "selective:2",
                                                              mix])
    # the convolutions' kernel scratch: the CPU's (and on AVX2 the threads') choice (Note
    # [Numbers that depend on the CPU], tests/clients/harness.py)
    assert run.ledger.peak_with_scratch() == run.allocator_peak > run.ledger_peak
    assert_pinned(run.allocator_peak, bf16=336_208)
    assert run.ledger_peak == 292_928
    at = run.summary.at_peak
    assert (at["parameter"], at["optimizer_state"]) == (4_008, 2 * 4_008 + 6 * 4)
    assert at["buffer"] == 60 + 4 * (8 * 4 * 6 * 6 + 8 * 8 + 8 * 10) == 5_244
    p = run.policies[mix]
    assert p.predicted == p.measured
    assert_pinned(p.measured, bf16=286_532)
    for kind in ("checkpoint", "selective"):
        p = run.policies[f"{kind}:2"]
        assert p.predicted is None and p.measured is None, p
        assert p.predict_refusal == p.measure_refusal == (
            f"memledger: {kind}:2 would re-run 2, whose forward replaces 2.mem by a tensor "
            "made from the one before (a state kept across calls: a metric's running sums, a "
            "spiking neuron's membrane), so the re-run would start from what the forward left "
            "and compute other values (other gradients, or a metric that counts the batch "
            "twice); offload that module instead, or keep that write out of the region")


def test_neurons_handed_their_membrane_are_predicted_as_measured():
    """Tutorial 5's network: each neuron is handed its membrane (`self.lif1(cur1, mem1)`)
    and sets `self.mem = mem` before replacing it, so a re-run reads the saved argument and
    recomputes the same step. measure refused `checkpoint:lif1` (the re-run left other
    values than it found: Note [What the forward call left], measure/apply.py), predict
    refused `selective:lif2` (its first time step made the membrane on another path than
    the next), and the re-run's membrane, set on the module again, was held by measure and
    let go by the replay: 4 B under (Note [A buffer a re-run sets again]). Parameters:
    fc1 256 x 64 + 64, fc2 64 x 10 + 10: 17,098 floats, 68,392 B; Adam's state twice that
    and four 4 B step counters."""
    pols = {"checkpoint:lif1": 499_116, "selective:lif2": 493_932,
            "checkpoint:fc1+offload:fc2": 486_832}
    run = run_client("train_snntorch.py", ["--mode", "class"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 477_808
    at = run.summary.at_peak
    assert (at["parameter"], at["optimizer_state"]) == (68_392, 2 * 68_392 + 16)
    for policy, peak in pols.items():
        p = run.policies[policy]
        assert p.predicted == p.measured == peak, (policy, p)


@pytest.mark.parametrize("argv", [["--mode", "seq"], ["--mode", "class", "--neuron",
                                                       "synaptic"]])
def test_the_doctor_finds_nothing_on_snntorch_loops(argv):
    """`utils.reset(net)` at each batch (tutorial 7), or the state made afresh in the
    forward (tutorial 5, synaptic neurons): each neuron's buffers carry the step's graph
    at the boundary, none of it from an earlier step."""
    assert_one_doctor_error("train_snntorch.py", argv, 2, None, "")


def test_a_loop_that_never_resets_its_neurons_is_explained():
    """The classic snntorch mistake: no `utils.reset(net)`, so each `init_hidden` neuron
    carries the last batch's graph into the next, and step 2's backward fails ("Trying to
    backward through the graph a second time"). The doctor said only that, exit 3: the
    script died before the step boundary where `cross_step_retention` names module state
    with history. The scan now also runs as a backward raises (Note [A backward that fails
    through an earlier step], trace/doctor_retention.py), and the failure's line carries
    its finding: the three membranes, at the line that made `net`."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / "train_snntorch.py",
                                          ["--mode", "seq", "--bug", "noreset"], 3)
    assert outcome.code == 3 and "backward through the graph a second time" in outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == [("cross_step_retention",
                                                                 "error")]
    f = report.findings[0]
    assert f.message.startswith(
        "3 buffers of `net` (`net.2.mem`, `net.5.mem`, `net.8.mem`) carry autograd history "
        "across optimizer steps into step 2, whose backward then failed (Trying to backward "
        "through the graph a second time (or directly access saved tensors after they have "
        "already been freed)): the module keeps tensors its forward made"), f.message
    lines = (HERE / "train_snntorch.py").read_text().splitlines()
    assert lines[f.where.line - 1].strip().startswith("net = conv_net(")
