"""Mega-pytorch (lucidrains' MEGA, tests/clients/train_mega.py): a `Mega` language model in
the library's `AutoregressiveWrapper`, as its train.py trains it (its TextSamplerDataset
through a DataLoader, Adam, `clip_grad_norm_`, validation under `no_grad`, `generate`).
Each `MegaLayer`'s multi-headed EMA is an FFT convolution (`rfft` / `irfft`, complex64
spectra, a conjugate view, `roll`, `index_select`).

Measured (`tests/clients/harness.py run_client`, the helper hunt47c, 2026-12-06, torch
2.13.0 CPU (MKL FFT), Mega-pytorch 0.1.0; dim 16, depth 2, 4 EMA heads, 16 tokens, batch
2, `--steps 2`, one thread): the ledger 324,868 B + 32,768 B of kernel scratch (the
backward's `_fft_c2c`, MKL's copy of its input) = the allocator's 357,636 B;
`checkpoint:net.layers.*.0` 280,868 B, `offload:@MultiHeadedEMA` 311,524 B and
`selective:net.layers.*.0` 304,420 B predicted and measured. Every module of a depth-1
model with `--norm-heads` under each of checkpoint, selective and offload (72 policies),
`--bidirectional`, `--laplacian`, `--pre-norm`, `--autocast`, `--accum 2`, `--freeze`,
`--validate-every 1 --generate-every 1`, `--steps-by forward` and `whole`: every one
predicted to the byte, `trace --fake` equal to the real ledger, `compare` ADOPT / OK (the
gradients equal), the doctor silent but for train.py's own `loss.backward()` on the
undivided loss with `--accum 2` (`loss_not_divided`, true).

One bug, in the doctor (Note [A frame's locals, let go of], trace/where.py): reading the
training loop's frame for names left Python 3.11's snapshot of its locals on the frame,
which held the previous `loss` past the script's `loss = model(...)`: the ledger
`doctor -o` records read 324,872 B at the peak against the trace's 324,868; with the
validation forward outside `no_grad()` (`--val-grad`) it held that graph through the next
step (539,132 B against 532,940 in 3 steps), and `doctor --steps 2` found nothing (the
graph died at the doctor's stop, unjudged).
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, doctor_with_ledger, ledger_pass, run_client

if importlib.util.find_spec("mega_pytorch") is None:
    pytest.skip("Mega-pytorch is not installed", allow_module_level=True)
# MKL's FFT scratch and the CPU time (2 threads spin: 10x) depend on the intra-op threads
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module", autouse=True)
def _imported():
    import mega_pytorch  # noqa: F401  (einops, scipy: before any pass)


def test_the_ffts_scratch_is_measured_and_each_policy_predicted_as_measured():
    """The ledger with the FFT's kernel scratch equals the allocator; checkpoint, offload
    and selective of the Mega layers predicted to the byte; the doctor's ledger is the
    trace's (it read 4 B over: the previous step's loss, held by the frame's snapshot),
    with no finding."""
    pols = ["checkpoint:net.layers.*.0", "offload:@MultiHeadedEMA", "selective:net.layers.*.0"]
    run = run_client("train_mega.py", [], pols, steps=2)
    assert (run.ledger_peak, run.ledger.peak_with_scratch(), run.allocator_peak) == (
        324_868, 357_636, 357_636)
    assert run.summary.peak.op == "_fft_c2c.default"
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        "checkpoint:net.layers.*.0": (280_868, 280_868),
        "offload:@MultiHeadedEMA": (311_524, 311_524),
        "selective:net.layers.*.0": (304_420, 304_420)}
    report, led = doctor_with_ledger("train_mega.py", [], steps=2)
    assert report.findings == []
    assert led.peak().bytes == run.ledger_peak


def test_a_validation_graph_the_loop_drops_is_judged_in_the_last_step():
    """`--val-grad`: the validation forward after step 1 keeps its graph in `loss` until
    step 2's `loss = model(...)` drops it. `doctor --steps 2` names it (it found nothing:
    the frame's snapshot of the loop's locals held the graph to the doctor's stop), and
    `doctor -o`'s ledger is the trace's, 532,940 B (539,132: the graph alive through step
    2's backward)."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--validate-every", "1", "--val-grad"]
    report, outcome = diagnose_in_process(HERE / "train_mega.py", argv, 2)
    assert outcome.code == 0
    assert [(f.check, f.evidence["steps"], f.evidence["calls"]) for f in report.findings] == [
        ("unused_graph", [2], 1)]
    _, led = doctor_with_ledger("train_mega.py", argv, steps=2)
    assert led.peak().bytes == ledger_pass("train_mega.py", argv, steps=2).peak().bytes \
        == 532_940
