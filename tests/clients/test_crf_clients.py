"""pytorch-crf (`torchcrf.CRF`) under a BiLSTM tagger, and rtdl_revisiting_models'
FT-Transformer (tests/clients/train_crf.py). Skipped without them.

Measured (`tests/clients/harness.py run_client`, the helper hunt41c, 2026-12-06, 1 step):
`--mode tagger` (embedding 16, BiLSTM 2 x 16, 5 tags, 8 sentences of 2-12 tokens) reads
the ledger with its kernel scratch equal to the allocator, 360,224 B (mkldnn's LSTM kernel
takes 45,880 B of scratch per direction in forward, 53,048 B in backward, which no tensor
holds); `checkpoint:lstm` 420,696 B and `offload:lstm` 302,488 B predicted and measured
(2 steps: 409,496 B baseline, `checkpoint:crf`, `selective:crf` 409,496 B). `--packed
--layers 2` (`pack_padded_sequence(enforce_sorted=False)`): 219,272 B both, `checkpoint:
hidden2tag+offload:lstm` and `offload:embedding` 219,272 B both; `selective:lstm` refused
by both in one line (the packed LSTM's cell changes its gates in place). `--mode ft` (the
default 1-block FT-Transformer, d_block 96, 4 numeric and 3 categorical columns, batch 64,
`make_default_optimizer()`): 3,221,160 B both, parameters 310,924 B to the hand count,
`offload:backbone.blocks.0.attention` 2,533,032 B and `checkpoint:backbone.blocks.*.ffn`
3,226,216 B both; `checkpoint:backbone.blocks.*` (ModuleDicts) refused by both. `--mode
mlp` / `resnet` (2 steps, batch 256): every policy of the blocks exact (ResNet's
`checkpoint:blocks.*` 1,303,320 B, `offload:blocks.*` 1,031,832 B, `selective:@BatchNorm1d`
1,799,640 B). The doctor finds nothing on the tagger (plain, packed, `--amp`, `--cell
gru`), FT-Transformer, MLP or ResNet. `trace --fake` equals the real ledger on the tagger
(fp32 and bf16 autocast, after Note [An LSTM's oneDNN workspace]), FT-Transformer and
ResNet; the packed tagger stops in one line at `pack_padded_sequence`. `--mode decode`
(`crf.decode` under no_grad, no optimizer, `--steps-by forward`): `checkpoint:crf` refused
by both in one line since Note [Work no gradient shows] (measure applied it before).
Whole file: ~4-6 s of CPU in process (2-core box, busy).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json

import pytest

if importlib.util.find_spec("torchcrf") is None or \
        importlib.util.find_spec("rtdl_revisiting_models") is None:
    pytest.skip("pytorch-crf and rtdl_revisiting_models not installed",
                allow_module_level=True)

from tests.clients.harness import HERE, _call, ledger_pass, run_client  # noqa: E402

pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # exact kernel scratch


def test_bilstm_crf_lstm_scratch_and_policies_exact():
    """The LSTM's kernel scratch (mkldnn_rnn_layer's, no tensor's) is what the ledger lacks
    of the allocator's peak, and the replay adds it back: 337,472 B of tensors + 22,752 B =
    360,224 B. Parameters to the hand count: embedding 1,600 + LSTM 2 x (2 x 1,024 + 2 x
    64) + emissions 165 + CRF 35 = 6,152 floats, 24,608 B."""
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_crf.py", ["--mode", "tagger"],
                         ["checkpoint:lstm", "offload:lstm"], steps=1)
    assert run.ledger_peak == 337_472
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 360_224
    assert run.summary.at_peak["parameter"] == 24_608
    ck, off = run.policies["checkpoint:lstm"], run.policies["offload:lstm"]
    assert ck.predicted == ck.measured == 371_424, ck
    assert off.predicted == off.measured == 253_216, off


def test_packed_sequences_and_ft_transformer_policies():
    """`pack_padded_sequence` over two LSTM layers, and FT-Transformer built from
    `get_default_kwargs()` with its own AdamW: peaks and policies to the byte, refusals in
    one line on both sides."""
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_crf.py", ["--mode", "tagger", "--packed", "--layers", "2"],
                         ["checkpoint:hidden2tag+offload:lstm", "selective:lstm"], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 219_272
    mix, sel = run.policies["checkpoint:hidden2tag+offload:lstm"], \
        run.policies["selective:lstm"]
    assert mix.predicted == mix.measured == 219_272, mix
    assert sel.predicted is None and sel.measured is None
    assert sel.predict_refusal == sel.measure_refusal and "in place" in sel.predict_refusal

    with contextlib.redirect_stdout(io.StringIO()):
        ft = run_client("train_crf.py", ["--mode", "ft", "--batch", "64"],
                        ["offload:backbone.blocks.0.attention", "checkpoint:backbone.blocks.*"],
                        steps=1)
    assert ft.ledger.peak_with_scratch() == ft.allocator_peak == 3_221_160
    assert ft.summary.at_peak["parameter"] == 310_924
    off, box = ft.policies["offload:backbone.blocks.0.attention"], \
        ft.policies["checkpoint:backbone.blocks.*"]
    assert off.predicted == off.measured == 2_533_032, off
    assert box.predict_refusal == box.measure_refusal and "ModuleDict" in box.measure_refusal


def _measure_refusal(argv: list[str], policy: str, steps_by: str) -> tuple[int, str]:
    from memledger.measure import worker as measure_worker
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="memledger-crf-") as tmp:
        out = Path(tmp) / "measured.json"
        with contextlib.redirect_stdout(io.StringIO()):
            code = _call(measure_worker.main, ["--out", str(out), "--policy", policy,
                                               "--steps", "2", "--time-steps", "0",
                                               "--steps-by", steps_by,
                                               str(HERE / "train_crf.py"), "--", *argv])
        res = json.loads(out.read_text())
    return code, res.get("error", "") or res["peak_bytes"]


def test_a_decoder_no_gradient_reaches_is_refused_alike():
    """An evaluation script (no optimizer; `crf.decode` under `torch.no_grad()`), traced
    `--steps-by forward`: predict refused `checkpoint:crf` (its parameters read by
    `_viterbi_decode`, the module never called: "never called as a module"), and measure
    applied it ("applied to crf", exit 0, the baseline's 117,688 B): it judged a part that
    never ran only once an optimizer step had decided the model, and told a module run
    through another method by a gradient, which `no_grad` never leaves. Now measure
    refuses it in predict's words (Note [Work no gradient shows], measure/apply.py)."""
    from memledger.errors import EXIT_USAGE, PolicyError
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_crf.py", ["--mode", "decode"], steps=2, steps_by="forward")
    assert led.summary().steps_traced == 2
    with pytest.raises(PolicyError) as refused:
        predict(led, [parse_policy("checkpoint:crf")], bandwidth=1e9)
    code, said = _measure_refusal(["--mode", "decode"], "checkpoint:crf", "forward")
    assert code == EXIT_USAGE
    assert said == str(refused.value)
    assert "never called as a module" in said


def test_the_fake_run_keeps_the_lstms_onednn_workspace():
    """`trace --fake` of the tagger: the meta kernel of `mkldnn_rnn_layer` returns its
    workspace empty where the CPU kernel keeps it for the backward (oneDNN's gates and
    states of every time step, page-rounded; 114,688 B per direction in fp32): the fake
    ledger read 229,376 B of activations under the real one, and each policy with it
    (Note [An LSTM's oneDNN workspace], trace/fake.py). Under bf16 autocast, as here, the
    stand-in first stopped the run ("'_CpuKernel' object has no attribute '_opname'",
    read for autocast's casts). Two steps: the evaluation's `crf.decode` after the first
    runs the kernel out of training, where it makes no workspace (the stand-in first
    crashed there too). fp32 reads equal as well (docs/accuracy.md): a CPU without bf16
    (AVX2 only) runs that, as oneDNN refuses a bf16 LSTM there ("could not create a
    primitive descriptor for the LSTM forward propagation primitive", untraced too)."""
    from tests.clients.harness import fake_client_gaps, native_bf16

    amp = ["--amp"] if native_bf16() else []
    assert fake_client_gaps("train_crf.py", ["--mode", "tagger", *amp],
                            ["checkpoint:lstm", "offload:lstm"]) == {}


def test_the_doctor_finds_nothing_on_the_tagger():
    """A correct NER loop: packed sentences, the CRF's mean negative log-likelihood,
    gradient clipping, and `crf.decode` under `no_grad` (in eval mode) after each step.
    The same reads clean on FT-Transformer, ResNet, MLP, `--amp` and `--cell gru` (run by
    hand, 3 steps each)."""
    from tests.clients.harness import assert_one_doctor_error

    with contextlib.redirect_stdout(io.StringIO()):
        assert_one_doctor_error("train_crf.py", ["--mode", "tagger", "--packed"], 2, None, "")
