"""PEER-pytorch and minGRU-pytorch (tests/clients/train_peer_mingru.py): lucidrains' PEER
(product-key retrieval of tiny experts whose down and up weights are `nn.Embedding` rows
gathered per token and head) in residual blocks of a token LM, and minGRU (a log-space
parallel scan, `cumsum` then `logcumsumexp`, with a carried hidden state) as the library's
`minLM` and as bare layers trained by truncated BPTT.

Measured (`tests/clients/harness.py run_client`, the helper hunt50e, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator with its kernel scratch,
every policy predicted = measured or refused by both, `trace --fake --device cpu` equal to
the real ledger on every configuration below):
- `--model peer` (2 steps): 224,040 B; `checkpoint:blocks.*` 196,844, `offload:blocks.*`
  161,960, `selective:@PEER` 219,764, `checkpoint:blocks.0.weight_down_embed` 229,096.
  `--sparse` (the expert tables' sparse gradients, SparseAdam): 224,024 B; 206,044,
  161,944, 219,748. `--lora --competing`: 809,356 B; 582,468, 502,084, 608,972
  (`selective:@PEERLora`). `--chunk 4` (ChunkedPEER's own checkpoint): 199,584 + 7,672 B
  of kernel scratch; a policy around it refused by both. With `--sparse`, 1 step (the
  test): 170,352 B; 155,432, `offload:blocks.1` 159,024, 166,080.
- `--model mingru` (2 steps): 300,980 + 4,092 B; `checkpoint:layers.*.2` 249,464,
  `offload:layers.*.2` 195,504, `selective:@minGRU` 269,944. `--lstm --conv --dropout 0.1`
  356,180 + 4,092 B; `--amp` 231,544 + 7,672 B; `--generate 3 --validate` (recurrent
  decoding with the carried hidden states) 301,364 + 4,092 B.
- `--model rnn --no-detach` (the carried state not detached, `retain_graph=True`), 1 step
  (the test): 202,044 B; `offload:layers.*` 88,636 B (94,780 predicted before: Note [Saved
  again after its read-back], replay/engine.py), `offload:layers.0+selective:layers.1.
  to_out` 151,292 B (157,436 before).
The doctor finds nothing on the PEER loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("PEER_pytorch") is None \
        or importlib.util.find_spec("minGRU_pytorch") is None:
    pytest.skip("PEER-pytorch or minGRU-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

S = "train_peer_mingru.py"


def test_peer_experts_and_a_carried_mingru_state_are_predicted_as_measured():
    """PEER blocks with sparse expert gradients (SparseAdam for the tables): a checkpoint
    of every block, offload of one, selective on the PEER class, each predicted and
    measured to the byte; the doctor finds nothing on its loop. Then minGRU layers trained
    by truncated BPTT with the hidden state carried undetached: the next chunk saves the
    carried state again (`prev_hidden.log()`) after chunk 0's backward read the first
    save back, and offload is predicted as measured."""
    peer = ["--model", "peer", "--sparse"]
    pols = {"checkpoint:blocks.*": 155_432, "offload:blocks.1": 159_024,
            "selective:@PEER": 166_080}
    run = run_client(S, peer, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 170_352
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error(S, peer, 2, None, "")

    rnn = ["--model", "rnn", "--no-detach"]
    run = run_client(S, rnn, ["offload:layers.*"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 202_044
    off = run.policies["offload:layers.*"]
    assert off.predicted == off.measured == 88_636
