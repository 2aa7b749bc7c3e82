"""accelerated-scan 0.3.1 and assoc-scan 0.0.6 (tests/clients/train_scan.py): gated
linear recurrences solved by scan, in small language models on random tokens: blocks
around accelerated-scan's reference scan (`accelerated_scan.ref.scan`, the pure-torch
Blelloch tree; its warp and triton kernels are CUDA only), minGRU blocks around
assoc-scan's `AssocScan` (its combine a `torch.jit.script` function, `prev=` a carried
state, `reverse=True`), and a log-space minGRU (Heinsen's scan: cumsum, logcumsumexp,
exp), with truncated BPTT (`--tbptt`: each block's last state carried, detached).

Measured (`tests/clients/harness.py run_client`, the helper hunt56c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX-512 bf16), OMP_NUM_THREADS=1; 2 steps; ledger = allocator, no
kernel scratch, every policy predicted = measured; docs/accuracy.md, "accelerated-scan
and assoc-scan"):
- `--model assoc`: 52,368 B; `checkpoint:blocks.0.scan` 54,672 B (measure said "the
  script failed" before: Note [An early stop TorchScript dropped]), `checkpoint:
  @AssocScan` 59,504, `checkpoint:blocks.*` 53,328, `selective:blocks.*` 57,424,
  `offload:blocks.*` 33,032 B.
- `--model log --tbptt`: 55,952 B; `selective:blocks.*` 59,696 B (predicted 58,928
  before: Note [A storage's two categories, split last]), `selective:blocks.*:save=
  cumsum,logcumsumexp,exp` 57,456 (56,368 before), `checkpoint:@LogMinGRUBlock` 55,600,
  `offload:blocks.*` 34,132 B; `trace --fake --device cpu` the same ledger.
- `--model ref --chunks 2 --tbptt`: 73,624 B; `checkpoint:blocks.*` 66,360,
  `offload:blocks.*` 34,064, `offload:blocks.0+checkpoint:blocks.1` 59,256 B.
The doctor finds nothing on the loop; `--accum 2 --bug zero-in-accum` (zero_grad inside
the accumulation loop) is one `dropped_update` warning at the backward's line.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, fake_client_gaps, \
    run_client

if importlib.util.find_spec("accelerated_scan") is None or \
        importlib.util.find_spec("assoc_scan") is None:
    pytest.skip("accelerated-scan or assoc-scan is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def _all_measured(run, pols: dict) -> None:
    for policy, peak in pols.items():
        got = run.policies[policy]
        assert got.predicted == got.measured, (policy, got.predict_refusal,
                                               got.measure_refusal)
        assert_pinned(got.measured, amd_bf16=peak)


@pytest.mark.slow
def test_assoc_scan_checkpointed_alone_stops_inside_its_scripted_combine():
    """AssocScan's last save is the `addcmul` of its scripted `binary_operator`: a
    checkpoint of the scan module alone stops its re-run inside TorchScript, whose
    interpreter turned torch's stop into a RuntimeError of its own (torch's checkpoint
    fails that backward in plain torch too). measure reported the script failed where
    predict priced 54,672 B; now measured alike. Around the whole block the last save is
    the `out` Linear's, in Python: exact before."""
    pols = {"checkpoint:blocks.0.scan": 54_672, "checkpoint:@AssocScan": 59_504,
            "checkpoint:blocks.*": 53_328, "offload:blocks.*": 33_032}
    run = run_client("train_scan.py", ["--model", "assoc"], list(pols))
    assert run.ledger_peak == run.ledger.peak_with_scratch() == 52_368
    assert_pinned(run.allocator_peak, amd_bf16=52_368)
    _all_measured(run, pols)


@pytest.mark.slow
def test_log_space_mingru_with_carried_state_is_predicted_as_measured():
    """The log-space minGRU with its state carried: the state (`exp`'s output, saved by
    its own backward) reads `activation` to its step's end and `other` from there, and
    the `out` Linear on the sliced scan runs `clone`, `mm` and the bias add. Selective
    keeps that `mm` in its cache to the block's backward (it comes after the block's last
    save); the replay held another storage instead, three rows on past the split states:
    58,928 and 56,368 B predicted, 768 and 1,088 B under."""
    pols = {"selective:blocks.*": 59_696,
            "selective:blocks.*:save=cumsum,logcumsumexp,exp": 57_456,
            "checkpoint:@LogMinGRUBlock": 55_600, "offload:blocks.*": 34_132}
    argv = ["--model", "log", "--tbptt"]
    run = run_client("train_scan.py", argv, list(pols))
    assert run.ledger_peak == run.ledger.peak_with_scratch() == 55_952
    assert_pinned(run.allocator_peak, amd_bf16=55_952)
    _all_measured(run, pols)
    assert fake_client_gaps("train_scan.py", argv, ["selective:blocks.*"]) == {}


@pytest.mark.slow
def test_reference_scan_in_chunks_and_the_doctor():
    """accelerated-scan's reference scan in two chunks a step (each chunk's state in as
    a first column of gate 1), truncated BPTT, accumulation and clipping: every policy
    measured as predicted, nothing found by the doctor; zero_grad inside the accumulation
    loop is found at the backward's line."""
    pols = {"checkpoint:blocks.*": 66_360, "offload:blocks.*": 34_064,
            "offload:blocks.0+checkpoint:blocks.1": 59_256}
    run = run_client("train_scan.py", ["--model", "ref", "--chunks", "2", "--tbptt"],
                     list(pols))
    assert run.ledger_peak == run.ledger.peak_with_scratch() == 73_624
    _all_measured(run, pols)
    assert_one_doctor_error("train_scan.py", ["--model", "ref", "--chunks", "2", "--tbptt",
                                              "--accum", "2", "--clip", "1"], 2, None, "")
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE
    report, outcome = diagnose_in_process(HERE / "train_scan.py", [
        "--model", "ref", "--accum", "2", "--bug", "zero-in-accum"], 2)
    assert outcome.code == 0
    assert [(f.check, f.severity) for f in report.findings] == [("dropped_update", "warning")]
    lines = (HERE / "train_scan.py").read_text().splitlines()
    assert lines[report.findings[0].where.line - 1].strip() == "(loss / args.accum).backward()"
    assert report.findings[0].evidence["dropped"] == 2
