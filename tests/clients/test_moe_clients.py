"""mixture-of-experts and soft-moe-pytorch (tests/clients/train_moe.py): lucidrains' port of
the sparsely-gated top-2 MoE (its load-balancing loss added to the task loss; the second
expert kept with a probability drawn from the global generator in every forward, so a
checkpoint's re-run must route as the forward did) and his Soft MoE in a small classifier.

Measured (`tests/clients/harness.py run_client`, the helper hunt43a, 2026-12-06), default
sizes (dim 32, batch 4, seq 16, 2 blocks), 2 steps: every mode reads the ledger equal to the
allocator and every policy predicted = measured, and `compare` finds the gradients bitwise
under checkpoint, selective and offload of the MoE layers and of the gate alone (the
re-run draws the same second experts):
- `--mode moe` 883,684 B; `checkpoint:blocks.*` and `checkpoint:blocks.*.moe` 834,640,
  `selective:blocks.*.moe` 881,700, `offload:blocks.*.moe` 807,240,
  `checkpoint:blocks.*.moe.gate` 856,292, `selective:blocks.*.moe.gate` 858,340;
- `--mode hier` (HeirarchicalMoE, 2 x 2) 986,812 B, `--mode soft` and `soft-noise`
  897,772 B, `--mode dynamic --seq 14` 1,009,340 B, each under five policies
  (docs/accuracy.md); soft with dropout, GEGLU, LayerNorm and a mask; moe under bf16
  autocast with a validation every step; with the script's own checkpoint (reentrant or
  not) every policy inside it is refused by predict and measure alike, in one line;
- `--aux-backward` (`loss.backward(retain_graph=True)`, then `aux.backward()`): checkpoint
  of a layer both passes run through is measured, not predicted (as for ST-MoE), selective
  refused by both, offload exact;
- the doctor: nothing on every mode, with accumulation, with `--aux-backward`, under the
  script's own checkpoint; one true error on `--log-aux`.
What it found is below: a fake run of Soft MoE under the script's own checkpoint stopped in
backward, a simulated rank read a collective's outputs as known values, and `--world` told
a script that never joins a group that it had. A `--fake` run of the top-2 gate stops at
its `safe_one_hot` (Rule 24), as ST-MoE's does. Skipped without the two libraries."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import tempfile
from pathlib import Path

import pytest

if importlib.util.find_spec("mixture_of_experts") is None \
        or importlib.util.find_spec("soft_moe_pytorch") is None:
    pytest.skip("mixture-of-experts and soft-moe-pytorch are not installed",
                allow_module_level=True)

from tests.clients.harness import HERE, _call, assert_one_doctor_error, fake_client_gaps, \
    ledger_pass, run_client  # noqa: E402

pytestmark = pytest.mark.clients

SMALL = ["--dim", "16", "--batch", "8", "--seq", "16", "--vocab", "32"]


def test_top2_routing_redrawn_by_the_rerun_is_predicted_as_measured():
    """The gate draws its second experts (`second_policy_train='random'`) in every forward:
    the checkpoint's re-run restores the generator and routes the same tokens, so the
    dispatch and combine tensors it makes again are the forward's. The aux loss is in the
    loss, so its graph runs through every gate. 2 steps at dim 16, batch 8, seq 16."""
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_moe.py", ["--mode", "moe", *SMALL],
                         ["checkpoint:blocks.*.moe", "selective:blocks.*.moe.gate",
                          "checkpoint:blocks.0+offload:blocks.1.moe"])
    assert run.summary.steps_traced == 2
    assert run.ledger_peak == run.allocator_peak == 523_252
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {"checkpoint:blocks.*.moe": (437_492, 437_492),
                   "selective:blocks.*.moe.gate": (467_572, 467_572),
                   "checkpoint:blocks.0+offload:blocks.1.moe": (382_752, 382_752)}


def test_soft_moe_under_its_own_checkpoint_runs_fake_as_real():
    """soft-moe-pytorch's `Experts.forward` calls `expert.to(self.device)` for every expert
    in every forward. torch's `_apply` swaps a fake parameter even where `.to` changes
    nothing, and under the script's non-reentrant checkpoint the re-run in backward did
    so after the graph had taken the parameters' gradient accumulators: every `trace
    --fake` stopped with "Trying to execute AccumulateGrad node that was poisoned by
    swap_tensors" (exit 3), the real run trains. Now the fake ledger equals the real one,
    peak, categories and the policies' predictions (Note [A swap that changes nothing],
    trace/fake_swap.py)."""
    gaps = fake_client_gaps("train_moe.py", ["--mode", "soft", "--grad-ckpt", "nonreentrant",
                                             *SMALL], ["offload:head", "checkpoint:emb"])
    assert gaps == {}


def _simulated_rank(argv: list[str]) -> tuple[int, str]:
    """`trace --fake --world 2 --steps 1` of train_moe.py in this process: (exit, line)."""
    from memledger.trace import worker as trace_worker

    with tempfile.TemporaryDirectory(prefix="memledger-moe-") as tmp:
        status = Path(tmp) / "status.json"
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            code = _call(trace_worker.main, ["ledger", "--fake", "--world", "2", "--out",
                                             str(Path(tmp) / "x.ledger"), "--status",
                                             str(status), "--steps", "1",
                                             str(HERE / "train_moe.py"), "--", *argv])
        return code, json.loads(status.read_text())["reason"]


def test_a_simulated_rank_of_soft_moe_is_told_what_the_real_rank_is_told():
    """soft-moe-pytorch's `Experts` asks `dist.is_initialized()` when it is built and, if
    so, gathers every rank's token count into `empty_like` buffers, asserts they agree
    and runs its share of the experts.

    - Without `--dist` the script joins no group, and a real `torchrun` of it runs two
      single processes; `--fake --world 2` had made its fake group before the script ran
      and answered True, so the simulated rank took the distributed path and, the fake
      group moving nothing, read the buffers' uninitialised memory as the counts (a branch
      per run) and stopped at the assert, exit 3. Now it is told False until it joins
      (Note [Asked whether the group exists], trace/fake_world.py) and refused as any
      script that never joins is, exit 2.
    - With `--dist` (the group joined first, as under torchrun; a real 2-rank run trains)
      the gathered counts were unknown (Note [What a collective writes], trace/fake.py):
      the run stopped at the assert that read them, exit 3, and named it as the last
      stand-in (before that: the script's batch draw). Every rank holds this rank's count
      now (Note [A symmetric world], trace/fake_collectives.py: the token count is the
      sequence's length on every rank of an SPMD job): the assert holds, the rank runs its
      share of the experts, and the fake rank 1 is the real one, 437,316 B in step 1's
      forward (`memledger trace --nproc 2 ... --steps 1`, by hand: 437,316 B on each rank,
      rank 0's allocator equal, rank 1's 12,732 B over in gloo's scratch, Note [Collective
      scratch]); `show` names the gather whose values it assumed."""
    code, reason = _simulated_rank(["--mode", "soft", *SMALL])
    assert code == 2 and "never called init_process_group" in reason, reason
    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_moe.py", ["--mode", "soft", "--dist", *SMALL], steps=1,
                          world=(2, 1))
    peak = led.peak()
    assert (peak.bytes, peak.step, peak.phase) == (437_316, 1, "forward")
    # the batch's 64 B index (`i = torch.randint(...)`, drawn before the forward and held
    # to the next draw) is `other` (Note [Kept by the script across a step],
    # memledger/ledger/held_roles.py; `temporary` 28,808 and `other` 9,216 before the
    # fix53b helper)
    assert {c: b for c, b in led.at_peak().items() if b} == {
        "parameter": 47_700, "buffer": 8, "activation": 317_728, "temporary": 28_744,
        "input": 1_088, "other": 9_280, "communication": 32_768}
    assert ("this rank's values on every rank (a symmetric world)",
            "dist.all_gather(gathered_tensors, t)") in \
        [(s.value, s.code) for s in led.summary().fake.standins]


def test_doctor_on_the_aux_loss_loop():
    """The task loss plus the blocks' aux losses, one backward: nothing found. Summing the
    aux losses for a log as tensors (`aux_sum = aux_sum + aux`, a slip) keeps every step's
    graph: one `cross_step_retention` error at that line."""
    with contextlib.redirect_stdout(io.StringIO()):
        assert_one_doctor_error("train_moe.py", ["--mode", "moe", *SMALL], 2, None, "")
        assert_one_doctor_error("train_moe.py", ["--mode", "moe", "--log-aux", *SMALL], 3,
                                "cross_step_retention", "aux_sum = aux_sum + aux")
