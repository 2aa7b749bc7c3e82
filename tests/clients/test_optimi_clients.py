"""torch-optimi and LOMO (tests/clients/train_optimi.py): a tiny transformer LM (2 blocks of
`nn.TransformerEncoderLayer`, dim 32, 21,312 parameters) trained with updates done during
backward.

Measured (`tests/clients/harness.py run_client`, `--steps 2`, hunt41a, 2026-12-06, torch
2.13.0 CPU, torch-optimi 0.3.3, lomo-optim 0.1.1; ledger = allocator, every policy
predicted = measured; at two intra-op threads. The tests run at one, as under xdist, where
the kernels' scratch is smaller: `--release --call-step` 312,736 B (`checkpoint:blocks.*`
261,536, `offload:blocks.*` 228,768), the StableAdamW row 312,794 (its mix 252,442), the
LOMO `--clip` row's `offload:blocks.*` 208,340):

- `--opt adamw` (fp32, plain loop): 489,260 B; `checkpoint:blocks.*` 437,740;
  `offload:blocks.*` 407,276; `selective:blocks.*` 474,156. Optimizer state 170,500 B.
- `--opt adamw --bf16 --foreach` (Kahan summation): 312,620 B (314,412 with kernel
  scratch, the allocator's); `checkpoint:blocks.*` 290,924; `offload:blocks.*` 268,716;
  `selective:blocks.*` 311,660. Optimizer state 127,876 B.
- `--opt adamw --bf16 --release` (gradient release): 312,732 B (314,524 with kernel
  scratch); `checkpoint:blocks.*` 278,556; `offload:blocks.*` 236,444;
  `selective:blocks.*` 307,228. With `--call-step` 4 B more everywhere (the group's step).
- `--opt adamw --release --accum 2` (optimizer accumulation): 489,372 B;
  `checkpoint:blocks.*` 399,656; `offload:blocks.*` 343,004; `selective:blocks.*` 464,668.
- `--opt stableadamw --bf16 --release --accum 2 --call-step`: 312,794 B (314,586 with
  kernel scratch); `checkpoint:blocks.*` 278,618; `offload:blocks.1` 278,490;
  `checkpoint:blocks.0+offload:blocks.1` 269,466. Optimizer state 128,050 B.
- `--opt adamw --bf16 --release --ckpt` (the model checkpoints its own blocks): 248,092 B
  (278,556 with the bf16 matmuls' kernel scratch, the allocator's); `checkpoint:head`
  278,556; `checkpoint:blocks.*` and `offload:blocks.*` refused by both sides (the script
  checkpoints the blocks already).
- `--opt lomo` (no `optimizer.step()`: the whole script, 3 iterations): 318,760 B;
  `checkpoint:blocks.*` 237,224; `offload:blocks.*` 176,488; `selective:blocks.*` 294,568.
- `--opt lomo --clip 1.0` (`grad_norm` then `fused_backward` over one graph): 364,436 B;
  `checkpoint:blocks.*` 271,100; `offload:blocks.*` 210,388; `selective:blocks.*` refused
  by both (a second backward through the blocks). The same under `--steps-by forward`.
- Every optimi optimizer's state equals the sum of its state tensors (Lion, StableAdamW,
  Adan, SGD with momentum, RAdam, Ranger; bf16 or fp32, foreach or gradient release), and
  `trace --fake` equals the real ledger on gradient release, foreach and LOMO. `doctor`
  finds nothing on gradient release (with accumulation, `--call-step`, `--ckpt`).
  AdaLomo allocates its state with `.cuda()`: not run (no GPU).
"""

import contextlib
import importlib.util
import io
import json
import warnings

import pytest

from tests.clients.harness import HERE, assert_pinned, ledger_pass, run_client

if importlib.util.find_spec("optimi") is None:
    pytest.skip("torch-optimi is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # bf16 kernel scratch
# is made per intra-op thread: the exact bytes below are at one thread, as under xdist

# 21,312 parameters in 29 tensors: embed 64x32; per block in_proj 96x32 + 96, out_proj
# 32x32 + 32, linear1 64x32 + 64, linear2 32x64 + 32, two norms 4x32; norm 2x32; head
# 64x32 + 64
N_PARAMS, N_TENSORS = 21_312, 29


def _phases_at(led, events) -> list[str]:
    """The phase of the ledger at each event."""
    ph = led.phases.sort_values("ev", kind="stable")
    evs, names = ph.ev.to_numpy(), ph.phase.to_numpy()
    return [names[evs.searchsorted(e, side="right") - 1] for e in events]


def _run(argv, policies, steps=2):
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")   # optimi: foreach is deprecated
        return run_client("train_optimi.py", argv, policies, steps=steps)


def test_gradient_release_is_one_step_per_backward_and_its_state_is_counted():
    """optimi's gradient release on bf16 parameters: one AdamW stepped per parameter
    (`opt.step(param=p)`, `opt.zero_grad(param=p)`) from post-accumulate-grad hooks inside
    backward, and `opt.step()` / `opt.zero_grad()` after it as a framework calls them.
    The same optimizer's second step inside one backward ended the training step there:
    `--steps 2` stopped after the first three parameters' updates and `measure` failed
    ("Profiler is already enabled on this thread") (Note [One optimizer stepped per
    parameter inside backward], trace/steps.py).

    Optimizer state by hand: exp_avg, exp_avg_sq and the Kahan compensation, each the
    parameters' bf16 bytes (3 x 42,624), a per-parameter int32 step under gradient release
    (29 x 4) and the group's int32 step the whole-model `opt.step()` makes (4): 127,992 B.
    The bf16 gradients (42,624 B a backward) are each freed inside backward, once their
    parameter is stepped: none is live at the peak or at the end."""
    run = _run(["--opt", "adamw", "--bf16", "--release", "--call-step"],
               ["checkpoint:blocks.*", "offload:blocks.*"])
    assert run.summary.steps_traced == 2
    assert run.ledger_peak == 312_736
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 312_736
    assert run.summary.at_peak["optimizer_state"] == 3 * 2 * N_PARAMS + 4 * N_TENSORS + 4
    assert run.summary.at_peak["parameter"] == 2 * N_PARAMS
    assert run.summary.at_peak["gradient"] == 0
    assert run.summary.resident["gradient"] == 0
    # the next (4, 17) int64 batch, made before the forward that ends the step (Note [The
    # next batch, at a step's end], trace/collector.py), and the loss
    assert (run.summary.resident["input"], run.summary.resident["temporary"]) == (544, 4)
    # the updates' ops are the optimizer's, and the saves are read before backward begins
    # (Note [An update inside backward is the optimizer's], trace/collector.py): 0 B and
    # no "optimizer" phase before
    assert run.summary.activations.saved_bytes == 109_316
    assert run.summary.by_phase_peak["optimizer"] == 271_776
    st = run.ledger.storages
    grads = st[st.category == "gradient"]
    assert (len(grads), int(grads.bytes.sum())) == (2 * N_TENSORS, 2 * 2 * N_PARAMS)
    assert set(_phases_at(run.ledger, grads.freed)) == {"backward", "optimizer"}
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:blocks.*": (got["checkpoint:blocks.*"][1],) * 2,
                   "offload:blocks.*": (got["offload:blocks.*"][1],) * 2}
    assert_pinned(got["offload:blocks.*"][1], bf16=228_768, avx2=228_768, amd_bf16=231_712)
    # the re-run's bf16 matmuls make other tensors without native bf16 (Note [Numbers that
    # depend on the CPU], tests/clients/harness.py)
    assert_pinned(got["checkpoint:blocks.*"][1], bf16=261_536, avx2=248_106)


def test_optimizer_accumulation_under_gradient_release():
    """optimi's optimizer accumulation: `opt.optimizer_accumulation = True` on the first of
    two micro-batches (the gradients go into StableAdamW's moments, the bf16 parameters do
    not move), False on the second (the update); each micro-batch's backward is a step.
    Optimizer state by hand: exp_avg, exp_avg_sq and the Kahan compensation (3 x 42,624),
    a bf16 `eps_sq` (29 x 2) and an int32 step (29 x 4) per parameter, the group's step
    (4): 128,050 B. A mix of policies is exact."""
    run = _run(["--opt", "stableadamw", "--bf16", "--release", "--accum", "2",
                "--call-step"], ["checkpoint:blocks.0+offload:blocks.1"])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 312_794
    assert run.summary.at_peak["optimizer_state"] == \
        3 * 2 * N_PARAMS + 2 * N_TENSORS + 4 * N_TENSORS + 4 == 128_050
    mix = run.policies["checkpoint:blocks.0+offload:blocks.1"]
    assert mix.predicted == mix.measured
    assert_pinned(mix.measured, bf16=252_442, avx2=247_200, amd_bf16=256_538)


@pytest.fixture(scope="module")
def lomo_imported():
    """lomo_optim imports transformers: imported before the first pass, every pass starts
    from the same state."""
    if importlib.util.find_spec("lomo_optim") is None:
        pytest.skip("lomo-optim is not installed")
    import lomo_optim  # noqa: F401


def test_lomo_that_never_steps_is_named_and_its_norms_are_optimizer_state(lomo_imported,
                                                                          tmp_path):
    """`lomo_optim.Lomo` is a torch.optim.Optimizer that never steps: its hooks update the
    parameters inside backward, driven by `optimizer.fused_backward(loss, lr)`, with
    `optimizer.grad_norm(loss)` first (a backward over the same graph, kept, for the
    norm). `doctor` said "call optimizer.step() in the script" (Lomo's `step()` raises
    NotImplementedError) and the gradient norms Lomo keeps (29 fp32 scalars, stacked,
    116 B) and its clipping coefficient (4 B) read `temporary`. Now the status names the
    optimizer and its tensors are optimizer state (Note [An optimizer that never steps],
    trace/optimizer_like.py). Traced whole (no step: 2 iterations of the script), every
    policy exact; selective is refused alike (a second backward through the blocks)."""
    from memledger.trace import worker as trace_worker
    from memledger.trace.optimizer_like import no_step_hint

    status = tmp_path / "status.json"
    argv = ["--opt", "lomo", "--clip", "1.0", "--steps", "2"]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trace_worker.main(["ledger", "--out", str(tmp_path / "run.ledger"), "--status",
                           str(status), "--steps", "1", str(HERE / "train_optimi.py"), "--",
                           *argv])
    res = json.loads(status.read_text())
    assert (res["steps"], res["optimizer_unstepped"]) == (0, "lomo_optim.lomo.Lomo")
    assert "optimizer_like" not in res
    assert no_step_hint("", doctor=True, unstepped=res["optimizer_unstepped"]) == (
        "; a lomo_optim.lomo.Lomo is alive, a torch.optim.Optimizer whose step() the script "
        "never called (one that updates the parameters inside backward, from hooks on them, "
        "steps no other way): count its steps by forward passes (doctor --steps-by forward)")

    run = _run(argv, ["offload:blocks.*", "selective:blocks.*"])
    assert run.ledger_peak == run.allocator_peak == 364_436
    assert run.summary.resident["optimizer_state"] == 4 * N_TENSORS + 4
    assert run.summary.resident["gradient"] == 0
    off, sel = run.policies["offload:blocks.*"], run.policies["selective:blocks.*"]
    assert (off.predicted, off.measured) == (208_340, 208_340)
    assert sel.predicted is sel.measured is None
    assert sel.predict_refusal == sel.measure_refusal != ""


def test_lomo_counted_by_forward_passes_keeps_its_state_as_optimizer_state(lomo_imported):
    """`trace --steps-by forward` of the LOMO loop: the optimizer is looked for there too
    (no optimizer step by the second backward's end), and what it made after the last
    traced forward is marked before that step ends (Note [The next batch, at a step's
    end], trace/collector.py): at the end 120 B of optimizer state (`temporary` before),
    the next batch as input and the loss."""
    with contextlib.redirect_stdout(io.StringIO()):
        led = ledger_pass("train_optimi.py", ["--opt", "lomo", "--clip", "1.0"], steps=2,
                          steps_by="forward")
    assert led.steps_traced == 2
    resident = led.resident_at_end()
    assert (resident["optimizer_state"], resident["input"], resident["temporary"]) == \
        (4 * N_TENSORS + 4, 544, 4)
