"""perceiver-ar-pytorch (tests/clients/train_perceiver_ar.py): a `PerceiverAR` language
model, its first layer cross-attending from the sequence to a prefix (with the repository's
`cross_attn_dropout=0.5`: each row keeps a random half of the prefix, drawn by `uniform_`
and `topk`, picked out by a boolean mask), causal self-attention layers after it held as
`ModuleList([attention, feed-forward])` items, rotary embeddings; the library's
AutoregressiveWrapper loss, a plain Adam loop with clipping (the repository's train.py).

Measured (`tests/clients/harness.py run_client`, 2 steps, hunt46b, 2026-12-06, torch
2.13.0 CPU), `--cross-dropout 0.5`: ledger 375,056 B = allocator;
`checkpoint:net.perceive_layers.*.*` 400,648 B, `selective:net.layers.*.*` 398,040 B,
`offload:net.*_emb` 374,464 B, predicted and measured (checkpoint and selective raise the
peak here: it lies in backward, where the re-runs add to the gradients). Also exact, not
kept as tests: `--prefix-mask --dropout 0.1`, `--accum 2 --validate --generate 3`,
`--heads 4 --perceive-depth 2 --depth 3 --batch 4` (plan's lowest, `offload:
net.perceive_layers.*.0`, 1,095,680 B both sides), fake runs against real ones; the
doctor finds nothing.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("perceiver_ar_pytorch") is None:
    pytest.skip("perceiver-ar-pytorch is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]

ARGV = ["--cross-dropout", "0.5"]


def test_perceiver_ar_policies_are_predicted_as_measured_and_named_by_what_they_save():
    """The tier: ledger = allocator, three policies predicted = measured, the doctor clean.

    And `offload:net.*_emb` said "2 of its 3 modules (net.pos_emb, net.rotary_pos_emb)
    saved nothing for backward inside their calls ... the policy changes nothing there"
    beside its own prediction, 592 B under the baseline and measured so: the token
    indices (400 B) and `pos_emb`'s (an `nn.Embedding` of `torch.arange(n)`, 192 B), each
    saved by the embedding's one op before it runs (Rule 5), one event before the call's
    own. Only the rotary table, made from a buffer, saves nothing (Note [A region that saves nothing],
    replay/predict.py)."""
    from memledger.replay.policies import parse_policy
    from memledger.report.compare_table import empty_line
    from memledger.replay.predict import predict

    ckpt, sel, emb = ("checkpoint:net.perceive_layers.*.*", "selective:net.layers.*.*",
                      "offload:net.*_emb")
    run = run_client("train_perceiver_ar.py", ARGV, [ckpt, sel, emb], steps=2)
    assert run.ledger_peak == run.allocator_peak == 375_056
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {ckpt: (400_648, 400_648), sel: (398_040, 398_040),
                   emb: (374_464, 374_464)}
    said = predict(run.ledger, [parse_policy(emb)], bandwidth=1e9).policies[0]
    assert (said.saving_bytes, said.empty_regions) == (592, ["net.rotary_pos_emb"])
    # and the line gives the rotary table's cause, not only a lazy module's
    line = empty_line(emb, said.empty_regions, len(said.regions))
    assert line.startswith(f"{emb}: 1 of its 3 modules (net.rotary_pos_emb) saved nothing")
    assert "nothing they compute needs a gradient, as with a table made from buffers" in line
    assert_one_doctor_error("train_perceiver_ar.py", ARGV, 2, None, "")
