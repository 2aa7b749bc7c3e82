"""`memledger compare` through the real CLI and fresh processes, on tiny scripts and on the
bundled examples."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from memledger.cli import main
from memledger.measure.runner import measure_script
from memledger.replay.policies import Policy
from memledger.verify.gates import run_gates
from memledger.verify.runs import CaptureResult, Variant, capture_in_process
from tests.conftest import EXAMPLES, ROOT

CLIENTS = ROOT / "tests" / "clients"

TINY = """
import torch
from torch import nn
torch.manual_seed(0)
model = nn.Sequential()
model.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
                               for _ in range(2)])
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
gen = {gen}
for step in range(12):
    x = torch.randn(64, 64, generator=gen)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print("step", step)   # the script's own output: never on stdout with --json
"""


def _tiny(tmp_path: Path, seeded: bool = True) -> Path:
    p = tmp_path / ("tiny.py" if seeded else "unseeded.py")
    gen = "torch.Generator().manual_seed(1)" if seeded else "torch.Generator()\ngen.seed()"
    p.write_text(textwrap.dedent(TINY.format(gen=gen)))
    return p


@pytest.mark.slow
def test_compare_json_gates_then_performance(tmp_path, capsys):
    html = tmp_path / "compare.html"
    code = main(["compare", str(_tiny(tmp_path)), "--policy", "checkpoint:blocks.*",
                 "--steps", "2", "--time-steps", "2", "--json", "--html", str(html)])
    out = capsys.readouterr().out
    d = json.loads(out)   # stdout holds the JSON and nothing else
    assert code == 0
    assert d["schema"] == "memledger.compare/1" and d["performance"] is True
    assert (d["device"], d["tolerance"], d["reproducible"]) == ("cpu", "bitwise", True)
    (p,) = d["policies"]
    assert p["policy"] == "checkpoint:blocks.*"
    assert p["gates"] == {"inputs": True, "gradients": True, "update": True}
    assert p["worst_gradient"]["max_abs"] == 0.0 and p["steps_compared"] == 2
    assert p["measured_peak_bytes"] > 0 and p["predicted_peak_bytes"] > 0
    assert p["saving_bytes"] == d["baseline"]["measured_peak_bytes"] - p["measured_peak_bytes"]
    # added time is against the faster of the two baseline timings
    b = d["baseline"]
    assert b["measured_step_time_s"] == min(b["measured_step_times_s"])
    assert p["measured_added_time_s"] == p["measured_step_time_s"] - b["measured_step_time_s"]
    # the only policy that passes is adopted exactly when it saves memory
    assert p["verdict"] == ("ADOPT" if p["saving_bytes"] > 0 else "OK")
    page = html.read_text()
    assert "checkpoint:blocks.*" in page and page.count("<svg") == 2
    # capture never touches what is measured: compare's peak is exactly what a plain
    # `memledger measure` run of the same policy reads from the allocator
    plain = measure_script(tmp_path / "tiny.py", [], Policy.parse("checkpoint:blocks.*"),
                           steps=2, time_steps=2)
    assert plain.peak_bytes == p["measured_peak_bytes"]


def test_unseeded_script_is_rejected_at_the_inputs_gate(tmp_path, capsys):
    code = main(["compare", str(_tiny(tmp_path, seeded=False)), "-p", "checkpoint:blocks.*",
                 "--steps", "1", "--json"])
    captured = capsys.readouterr()
    d = json.loads(captured.out)
    assert code == 1
    assert d["reproducible"] is False and d["performance"] is False
    (p,) = d["policies"]
    assert p["verdict"] == "REJECT" and p["failed_gate"] == "inputs"
    assert p["reason"] == ("inputs: the script's inputs are not reproducible: two baseline "
                           "runs differ at step 0 on forward arg[0]; seed the data loader")
    assert "memledger: 1 of 1 policies rejected" in captured.err


@pytest.mark.parametrize("args,message", [
    ([], "memledger: give at least one --policy"),
    (["-p", "explode:blocks.*"], "memledger: unknown policy kind 'explode'"),
    (["-p", "checkpoint:blocks.*", "--steps", "0"], "memledger: --steps and --time-steps"),
])
def test_bad_input_exits_2_before_running_anything(tmp_path, capsys, args, message):
    assert main(["compare", str(_tiny(tmp_path)), *args]) == 2
    assert capsys.readouterr().err.startswith(message)


@pytest.mark.slow
def test_selector_matching_no_module_exits_2_after_judging_the_others(tmp_path, capsys):
    """Note [One bad policy among several]: the bad selector's row says "not run", the good
    policy is still gated, and compare exits 2 with the selector's line after printing them.
    Before, the bad policy ended the comparison where it was met, the verdicts lost."""
    code = main(["compare", str(_tiny(tmp_path)), "-p", "checkpoint:layers.*",
                 "-p", "checkpoint:blocks.*", "--steps", "1", "--no-performance",
                 "--no-doctor", "--json"])
    assert code == 2
    out, err = capsys.readouterr()
    d = json.loads(out)
    bad, good = d["policies"]
    assert bad["verdict"] == "REJECT" and bad["failed_gate"] == "policy"
    assert bad["reason"].startswith("not run: selector 'layers.*' matches no module; the "
                                    "model's modules are")
    assert good["verdict"] == "OK" and good["failed_gate"] is None
    assert d["errors"] == [f"checkpoint:layers.*: {bad['reason'].removeprefix('not run: ')}"]
    assert err.strip().splitlines()[-1] == (
        "memledger: 1 policy not run, bad input for this script: checkpoint:layers.* (each "
        "row says why); compare reported what it could judge")


@pytest.mark.slow
def test_a_script_too_short_to_time_keeps_the_gates_verdicts(tmp_path, capsys):
    """A script that runs exactly --steps steps leaves none to time: compare learns it from
    the baseline's measure, now before the trace (Note [One bad policy among several]), and
    exits 2 with measure's advice after printing the gates' verdicts (before: exit 2 and
    no verdict at all)."""
    script = _tiny(tmp_path)
    script.write_text(script.read_text().replace("range(12)", "range(2)"))
    code = main(["compare", str(script), "-p", "offload:blocks.*", "--steps", "2",
                 "--time-steps", "2", "--no-doctor", "--json"])
    assert code == 2
    out, err = capsys.readouterr()
    d = json.loads(out)
    assert [p["verdict"] for p in d["policies"]] == ["OK"]
    assert d["performance"] is False and d["baseline"] == {}
    assert d["errors"] == ["performance not measured: the script ran only 2 optimizer steps, "
                           "none left to time; let it run 4 (e.g. -- --steps 4)"]
    assert "performance: tracing" not in err   # found by the baseline's measure, first
    assert err.strip().splitlines()[-1] == f"memledger: {d['errors'][0]}; compare reported " \
        "what it could judge"


# ---- the bundled examples -----------------------------------------------------------------
STANDARD = ["checkpoint:blocks.*", "offload:blocks.*", "selective:blocks.*"]


def _in_process(script, argv, variant, steps, out) -> CaptureResult:
    return capture_in_process(script, argv, variant, steps)


@pytest.mark.slow
def test_gpt_standard_policies_pass_bitwise_and_rng_free_recompute_is_rejected():
    # in this process (the CLI tests above cover fresh processes); the script seeds itself
    variants = [Variant(p, p) for p in STANDARD]
    variants.append(Variant("no-rng", broken="checkpoint_no_rng", selector="blocks.*"))
    rep = run_gates(EXAMPLES / "train_gpt.py", ["--steps", "3"], variants, steps=2,
                    runner=_in_process)
    assert rep.reproducible and rep.noise_floor == 0.0
    for o in rep.outcomes[:3]:
        assert o.passed, (o.variant.label, o.reason)
        assert o.comparison.worst_gradient.max_abs == 0.0
    bad = rep.outcomes[3].comparison
    # the recompute draws other dropout masks; the worst relative difference is in the
    # first block (its LayerNorm bias sums the gradient over every position)
    assert bad.gates == {"inputs": True, "gradients": False, "update": True}
    assert (bad.finding.gate, bad.finding.step, bad.finding.name) == (
        "gradients", 0, "blocks.0.ln_1.bias")


def test_mlp_policies_pass_bitwise():
    rep = run_gates(EXAMPLES / "train_mlp.py", ["--steps", "3"],
                    [Variant(p, p) for p in ("checkpoint:fc*", "offload:fc*", "selective:fc*")],
                    steps=2, runner=_in_process)
    assert [o.reason for o in rep.outcomes] == ["gates passed"] * 3


def test_cnn_standard_policies_pass_with_batchnorm():
    rep = run_gates(EXAMPLES / "train_cnn.py", ["--steps", "3"],
                    [Variant(p, p) for p in STANDARD], steps=2, runner=_in_process)
    # memledger's checkpoint recomputes each ConvBlock's BatchNorm in training mode and puts
    # its running statistics back afterwards: buffers, gradients and state stay bitwise equal
    for o in rep.outcomes:
        assert o.passed, o.reason
        assert o.gates == {"inputs": True, "gradients": True, "update": True}


OWN_CHECKPOINT = """
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(32, 128), nn.GELU(),
                                                    nn.Linear(128, 32)) for _ in range(2)])

    def forward(self, x):   # the script checkpoints its first block itself
        x = checkpoint(self.blocks[0], x, use_reentrant=False)
        return self.blocks[1](x)

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(1)
for step in range(8):
    x = torch.randn(16, 32, generator=gen)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_a_refused_policy_is_rejected_and_the_others_still_judged(tmp_path, capsys):
    """A policy refused as it runs (here: checkpoint of a block the script checkpoints
    itself, as `gradient_checkpointing_enable()` does) is that policy's REJECT, with the
    refusal's one line; the other policies are still gated, predicted and measured. Before,
    the gates rejected it, then predicting every policy refused it again and the whole
    compare ended in exit 2 with no verdict at all."""
    script = tmp_path / "own.py"
    script.write_text(textwrap.dedent(OWN_CHECKPOINT))
    code = main(["compare", str(script), "-p", "checkpoint:blocks.0", "-p", "offload:blocks.1",
                 "--steps", "2", "--time-steps", "1", "--no-doctor", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 1
    refused, offload = d["policies"]
    assert refused["verdict"] == "REJECT" and refused["measured_peak_bytes"] == 0
    assert refused["reason"].startswith("refused: checkpoint:blocks.0 would checkpoint "
                                        "blocks.0, which the script already checkpoints")
    assert "\n" not in refused["reason"]
    assert offload["verdict"] in ("ADOPT", "OK")
    assert offload["predicted_peak_bytes"] == offload["measured_peak_bytes"] > 0


PARAMETRIZED = """
    import torch, torch.nn as nn
    from torch.nn.utils import parametrizations as P

    class Block(nn.Module):
        def __init__(self, h):
            super().__init__()
            self.rnn = nn.LSTM(h, h, batch_first=True)
            self.proj = P.weight_norm(nn.Linear(h, h))

        def forward(self, x):
            return x + torch.tanh(self.proj(self.rnn(x)[0]))

    class LM(nn.Module):
        def __init__(self, v=50, h=16):
            super().__init__()
            self.emb = nn.Embedding(v, h)
            self.blocks = nn.Sequential(Block(h), Block(h))
            # spectral_norm calls its parametrization while the model is being built
            self.head = P.spectral_norm(nn.Linear(h, v))

        def forward(self, x):
            return self.head(self.blocks(self.emb(x)))

    torch.manual_seed(0)
    m = LM()
    opt = torch.optim.Adam(m.parameters(), 1e-3)
    g = torch.Generator().manual_seed(1)
    for step in range(3):
        x = torch.randint(0, 50, (4, 8), generator=g)
        loss = nn.functional.cross_entropy(m(x).flatten(0, 1), x.roll(-1, 1).flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


def _gates_json(tmp_path, capsys, source: str, *policies: str) -> tuple[int, dict]:
    """`compare --json` of a script made of `source`, the gates only (2 steps): its exit
    code and report."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    code = main(["compare", str(script), *[a for p in policies for a in ("-p", p)],
                 "--steps", "2", "--no-performance", "--no-doctor", "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_parametrization_called_while_the_model_is_built_is_not_the_model(tmp_path, capsys):
    """spectral_norm calls its ParametrizationList once while the model is built: the
    policy installer took it for the model, applied the policy to it and then to the model
    as well, and the gradient capture recorded every torch call from then on as the step's
    input, memledger's own `untyped_storage` reads under a policy included. Every policy
    was rejected with "input untyped_storage arg[0] differs at step 0". Now the capture
    starts over when the real model takes the parametrization in, and a re-run of the
    spectral-normed head is still caught: its power iteration updates `_u` again. It was
    caught by the gradient gate ("gradient of head.parametrizations.weight.original differs
    at step 0"); now measure refuses it as predict does, by the write itself (Note [State a
    re-run writes again])."""
    code, d = _gates_json(tmp_path, capsys, PARAMETRIZED, "checkpoint:blocks.*",
                          "offload:blocks.*", "checkpoint:head")
    assert code == 1
    ckpt, offload, head = d["policies"]
    assert (ckpt["verdict"], offload["verdict"]) == ("OK", "OK")
    assert head["verdict"] == "REJECT" and head["failed_gate"] == "script"
    assert "checkpoint:head would re-run head, whose forward writes head.parametrizations." \
        "weight.0._u in place" in head["reason"]


SCRIPTED = """
    import torch, torch.nn as nn

    class MLP(nn.Module):
        def __init__(self, h):
            super().__init__()
            self.a, self.b = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

        def forward(self, x):
            return x + self.b(torch.relu(self.a(x)))

    torch.manual_seed(0)
    blocks = [nn.Sequential(torch.jit.script(MLP(16)), nn.LayerNorm(16)) for _ in range(2)]
    m = nn.Sequential(*blocks, nn.Linear(16, 4))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for step in range(3):
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        nn.functional.cross_entropy(m(x), y).backward()
        opt.step()
        opt.zero_grad()
"""


def test_a_region_holding_a_torchscript_module_is_refused_and_the_others_judged(tmp_path,
                                                                                  capsys):
    """Note [TorchScript inside a region] (measure/apply.py): checkpointing a block that
    holds a scripted module crashed the script under the policy (torch's CheckpointError
    and its advice on the terminal), and the scripted module itself failed in the
    interpreter, which ended the whole comparison in exit 2. Now each is that policy's
    `REJECT refused:` in one line, and a policy on the unscripted modules is judged."""
    code, d = _gates_json(tmp_path, capsys, SCRIPTED, "checkpoint:[0-1]", "selective:*.0",
                          "checkpoint:*.1")
    assert code == 1
    block, scripted, norm = d["policies"]
    assert block["verdict"] == scripted["verdict"] == "REJECT"
    assert block["reason"] == (
        "refused: checkpoint:[0-1] would checkpoint 0, which holds 0.0, a TorchScript module "
        "(torch.jit.script or trace): TorchScript runs another graph by the time a checkpoint "
        "re-runs it in backward, so the re-run cannot match; select modules without "
        "scripted parts, or script them after choosing a policy")
    assert scripted["reason"].startswith("refused: selective:*.0 would checkpoint 0.0, a "
                                         "TorchScript module (torch.jit.script or trace)")
    assert norm["verdict"] == "OK"


@pytest.mark.slow
def test_maml_second_order_gradients_through_checkpoint():
    """A MAML loop (tests/clients/train_maml.py). Its inner `torch.autograd.grad(create_graph=
    True)` re-runs a checkpointed module inside a backward pass; the capture recorded that
    re-run's `linear` call as an input and rejected `checkpoint:0` ("input linear arg[0]
    differs"), wrongly: its gradients are bitwise the baseline's. The outer call hands the
    model its fast weights through `functional_call`; the re-run in backward read the
    module's own parameters instead, and `checkpoint:2` (the last Linear) gave other
    gradients (0.054 max abs on `0.weight`, rejected by the gradient gate). The re-run now
    reads what the first run read (Note [Parameters handed in], measure/apply.py): both
    policies are bitwise the baseline's."""
    variants = [Variant(p, p) for p in ("checkpoint:0", "checkpoint:2")]
    rep = run_gates(CLIENTS / "train_maml.py", ["4"], variants, steps=2, runner=_in_process)
    for outcome in rep.outcomes:
        assert outcome.passed, outcome.reason
        assert outcome.comparison.worst_gradient.max_abs == 0.0