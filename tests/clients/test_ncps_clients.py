"""ncps (Neural Circuit Policies; tests/clients/train_ncps.py): `CfC` and `LTC` sequence
models, fully connected or wired by `AutoNCP`, a CfC with `mixed_memory=True` (an LSTM cell
beside the CfC cell), fitted with MSE by Adam in a plain loop and under Lightning's `Trainer`
as the package's PyTorch example does (`self.model.forward(x)` in `training_step`).

Both models call their cell as `self.rnn_cell.forward(inputs, h, ts)` each time step, and
the wired CfC its layers as `self._layers[i].forward(...)`: no module hook sees the cell
run. predict refused a policy on the cell ("never called as a module"), and measure, whose
policy was the cell's `forward`, measured it: `checkpoint:rnn_cell` 53,676 B on the CfC
(`selective:` 58,796, `offload:` 22,852), 78,600 B on the wired LTC (`selective:@LTCCell`
the same), `checkpoint:@CfCCell` 105,852 B on the wired CfC, `checkpoint:model.rnn_cell`
56,016 B under Lightning. Both now refuse it in one line (Note [A forward called directly
runs plainly], memledger/measure/apply.py; pinned in plain torch by
tests/clients/test_direct_call.py); the modules the cell calls are predicted as measured.

Measured (`tests/clients/harness.py run_client`, the helper hunt45a, 2026-12-06, torch
2.13.0 CPU, ncps 1.0.1; 2 steps, batch 4, 6 time steps, 3 inputs, 12 units, backbone 16):
- `--model cfc`: the ledger 30,112 B, equal to the allocator; `checkpoint:rnn_cell.backbone`
  62,012 B, `checkpoint:rnn_cell.ff1+offload:rnn_cell.time_a` 62,412 B, `offload:fc`
  29,344 B, predicted and measured (a checkpoint per time step keeps the CPU RNG state,
  5,056 B, for each re-run: more than it frees at this size).
- `--model cfc-mixed --hx` (the state carried, detached): 49,708 B both; `checkpoint:lstm`
  76,344 B, `offload:lstm+checkpoint:rnn_cell.backbone` 71,816 B both sides.
- `--model ltc-ncp` 170,780 B, `--model cfc-ncp` 21,344 B, both equal to the allocator.
- `--loop lightning --model cfc`: 32,440 B both, in the forward (it read "in loss" before:
  the phase flipped at every part's call); `checkpoint:model.rnn_cell.backbone` 64,352 B,
  `offload:model.fc` 31,672 B both sides.
- By hand, also exact: `--task classify --backbone-layers 2 --dropout 0.2` (checkpoint,
  selective and offload on the backbone), `--mode pure`, `--mode no_gate`, `--timespans
  --batch 1`, `--call forward`, `--explicit` (the LTC's `.data` clipping after each step),
  and `--fake` ledgers of each equal to the real ones. The doctor finds nothing.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("ncps") is None:
    pytest.skip("ncps is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

# (cfc) backbone Linear(3 + 12, 16), ff1, ff2, time_a, time_b Linear(16, 12), fc Linear(12, 2)
CFC_PARAMS = (15 * 16 + 16 + 4 * (16 * 12 + 12) + 12 * 2 + 2) * 4
# (mixed memory) LSTMCell: input_map Linear(3, 48), recurrent_map Linear(12, 48, no bias)
LSTM_PARAMS = (3 * 48 + 48 + 12 * 48) * 4


def _refusal(selector: str, near: str) -> str:
    leaf = selector.split(".")[-1]
    return (f"memledger: selector '{selector}' matches {selector}, never called as a module: "
            f"the code runs its work through another of its methods (`{selector}.inverse(x)`, "
            f"`{selector}.encode(x)`) or calls its `.forward()` directly "
            f"(`self.{leaf}.forward(x)`) or, for a container (an nn.ModuleList), its "
            "submodules one by one; torch's module hooks, the trace's among them, see none of "
            "these, so the trace cannot tell where its work begins and ends, and a policy "
            f"acts on a module's call; select the modules inside it that run as calls: {near}, "
            f"or call the module itself (`self.{leaf}(x)`)")


def test_a_cfc_is_predicted_to_the_byte_and_its_cell_refused_alike():
    pols = {"checkpoint:rnn_cell.backbone": 62_012,
            "checkpoint:rnn_cell.ff1+offload:rnn_cell.time_a": 62_412, "offload:fc": 29_344,
            # the glob the refusal of `checkpoint:rnn_cell` advises (Note [What an uncalled
            # module's refusal advises], replay/policies.py)
            "checkpoint:rnn_cell.*": 274_720}
    run = run_client("train_ncps.py", ["--model", "cfc"], [*pols, "checkpoint:rnn_cell"])
    assert run.ledger_peak == run.allocator_peak == 30_112
    at = run.summary.at_peak
    assert (at["parameter"], at["gradient"]) == (CFC_PARAMS, CFC_PARAMS) == (4_392, 4_392)
    assert at["optimizer_state"] == 2 * CFC_PARAMS + 12 * 4   # Adam: 12 tensors' steps
    for text, peak in pols.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (peak, peak), (text, p)
    p = run.policies["checkpoint:rnn_cell"]
    assert p.predicted is None and p.measured is None, p
    assert p.predict_refusal == p.measure_refusal == _refusal(
        "rnn_cell", "rnn_cell.backbone, rnn_cell.ff1, rnn_cell.ff2, ... (4 more) "
        "(`rnn_cell.*` selects them all)")


def test_a_mixed_memory_cfc_carrying_its_state():
    """`mixed_memory=True`: an LSTM cell (`lstm`, called as a module) before the CfC cell
    each time step; `(h, c)` handed back and carried into the next batch, detached."""
    pols = {"checkpoint:lstm": 76_344, "offload:lstm+checkpoint:rnn_cell.backbone": 71_816}
    run = run_client("train_ncps.py", ["--model", "cfc-mixed", "--hx"], list(pols))
    assert run.ledger_peak == run.allocator_peak == 49_708
    assert run.summary.at_peak["parameter"] == CFC_PARAMS + LSTM_PARAMS == 7_464
    for text, peak in pols.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (peak, peak), (text, p)


@pytest.mark.parametrize("model, peak, policy, near", [
    # the LTC cell calls no module but its Softplus (the positive-parameter constraint)
    ("ltc-ncp", 170_780, "selective:@LTCCell", "rnn_cell.make_positive_fn"),
    # one CfC cell per NCP layer, each calling its time_a, time_b, tanh and sigmoid
    ("cfc-ncp", 21_344, "checkpoint:@CfCCell",
     "rnn_cell.layer_0.sigmoid, rnn_cell.layer_0.tanh, rnn_cell.layer_0.time_a, ... (1 more)"),
])
def test_wired_cells_are_refused_alike(model, peak, policy, near):
    """AutoNCP wirings (12 neurons, 2 motor): the LTC's cell, and the wired CfC's layers
    (called as `self._layers[i].forward(...)`), never run as module calls. Before: measured
    78,600 B (`selective:@LTCCell`) and 105,852 B (`checkpoint:@CfCCell`)."""
    run = run_client("train_ncps.py", ["--model", model], [policy])
    assert run.ledger_peak == run.allocator_peak == peak
    p = run.policies[policy]
    assert p.predicted is None and p.measured is None, p
    assert p.predict_refusal == p.measure_refusal
    # Note [What an uncalled module's refusal advises] (replay/policies.py)
    leaf = {"ltc-ncp": "rnn_cell", "cfc-ncp": "layer_0"}[model]
    assert p.predict_refusal.endswith(f"select the modules inside it that run as calls: {near}, "
                                      f"or call the module itself (`self.{leaf}(x)`)"), p


@pytest.fixture(scope="module")
def lightning():
    # torchmetrics makes a 4 B tensor at import, which the first in-process pass would see
    # and the others not (tests/clients/test_lightning.py)
    return pytest.importorskip("lightning.pytorch")


def test_the_packages_lightning_example(lightning):
    """`SequenceLearner`: `training_step` calls `self.model.forward(x)` (the model holds the
    CfC as `model`), `optimizer_step` steps and applies the cell's constraints, Lightning
    clips at 1. Before: `checkpoint:model.rnn_cell` measured 56,016 B, predict refused it.
    With no module call of the CfC, its parts are the top-level calls: the phase flipped
    between forward and loss at each (157 phase records in two steps, 74 `loss`) and the
    peak read "in loss", by phase forward 31,704 B, loss 32,440 B (Note [Parts called in a
    forward no hook sees], trace/collector.py)."""
    pols = {"checkpoint:model.rnn_cell.backbone": 64_352, "offload:model.fc": 31_672}
    run = run_client("train_ncps.py", ["--model", "cfc", "--loop", "lightning"],
                     [*pols, "checkpoint:model.rnn_cell"])
    assert run.ledger_peak == run.allocator_peak == 32_440
    assert run.summary.peak.phase == "forward"
    assert run.summary.by_phase_peak["forward"] == 32_440
    assert run.ledger.phases["phase"].tolist().count("loss") == 4   # MSELoss, zero_grad's
    for text, peak in pols.items():
        p = run.policies[text]
        assert (p.predicted, p.measured) == (peak, peak), (text, p)
    p = run.policies["checkpoint:model.rnn_cell"]
    assert p.measured is None and p.predict_refusal == p.measure_refusal, p


@pytest.mark.parametrize("argv", [["--model", "cfc-mixed", "--hx"],
                                  ["--model", "ltc-fc", "--explicit"]])
def test_the_doctor_finds_nothing_on_ncps_loops(argv):
    """The state carried across batches detached; the LTC's explicit constraints replace
    its parameters' `.data` after each step (no optimizer state moves with them)."""
    assert_one_doctor_error("train_ncps.py", argv, 2, None, "")
