"""`memledger plan` on the traced tiny GPT."""

import json
import shlex

from memledger.cli import main
from memledger.ledger.model import Ledger


def test_plan_picks_cheapest_fitting_policy(traced_examples, capsys):
    path = traced_examples["gpt"]
    base = Ledger.load(path).summary().measured.peak_bytes
    budget = int(base * 0.8)
    assert main(["plan", str(path), "--budget", f"{budget}B", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "memledger.plan/1" and d["fits"]
    assert d["blocks"] == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    assert d["predicted_peak_bytes"] <= budget
    fitting = [c for c in d["candidates"] if c["peak_bytes"] <= budget]
    assert d["predicted_added_time_s"] == min(c["added_time_s"] for c in fitting)
    assert d["policy"] != "none"                    # the baseline does not fit 80 %


def test_plan_baseline_fits_its_own_peak(traced_examples, capsys):
    path = traced_examples["gpt"]
    base = Ledger.load(path).summary().measured.peak_bytes
    assert main(["plan", str(path), "--budget", f"{base}B", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["policy"] == "none" and d["predicted_added_time_s"] == 0.0


def test_plan_budget_as_a_share_of_the_baseline(traced_examples, capsys):
    """`--budget 80%` is 80 % of the baseline peak plan reports, rounded down to a byte (on
    the old code: "cannot read size '80%'", exit 2), and plans as those bytes would."""
    path = traced_examples["gpt"]
    assert main(["plan", str(path), "--budget", "80%", "--json", "--no-front"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["budget_bytes"] == d["baseline_peak_bytes"] * 4 // 5
    assert main(["plan", str(path), "--budget", f"{d['budget_bytes']}B", "--json",
                 "--no-front"]) == 0
    assert json.loads(capsys.readouterr().out)["policy"] == d["policy"]
    assert main(["plan", str(path), "--budget", "80%", "--no-front"]) == 0
    assert ", 80% of the baseline " in capsys.readouterr().out
    for bad, why in (("0%", "share '0%' is no budget"), ("8x%", "cannot read share '8x%'")):
        assert main(["plan", str(path), "--budget", bad]) == 2
        assert why in capsys.readouterr().err


def test_plan_nothing_fits_exit_1(traced_examples, capsys):
    assert main(["plan", str(traced_examples["gpt"]), "--budget", "1MiB"]) == 1
    assert "no candidate fits 1MiB" in capsys.readouterr().err


def test_plan_prints_answer_band_search_and_front(traced_examples, capsys):
    path = traced_examples["gpt"]
    base = Ledger.load(path).summary().measured.peak_bytes
    assert main(["plan", str(path), "--budget", f"{int(base * 0.8)}B"]) == 0
    cap = capsys.readouterr()
    out = cap.out
    assert "per block:" in out and "exact)" in out and "runner-up:" in out
    assert "Pareto front (least added time per peak)" in out
    d_budget = int(base * 0.8)
    assert main(["plan", str(path), "--budget", f"{d_budget}B", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # plan prices; compare's gates say whether the gradients hold: the command to run next
    header = Ledger.load(path).header
    argv = ["--", *header["argv"]] if header["argv"] else []
    assert cap.err.strip().splitlines()[-1] == "next: " + shlex.join(
        ["memledger", "compare", header["script"], "-p", d["policy"], *argv])
    assert d["method"] == "exhaustive" and d["assumption_held"]
    assert d["added_time_lo_s"] <= d["predicted_added_time_s"] <= d["added_time_hi_s"]
    front = d["front"]
    assert front[-1]["policy"] == "none" and front[0]["peak_bytes"] < base
    assert all(a["added_time_s"] > b["added_time_s"] for a, b in zip(front, front[1:]))


def test_no_fit_with_the_peak_in_the_optimizer_says_why(tmp_path, capsys):
    # an Adam step over 4 x 512x512 weights at batch 1: the peak is the foreach step's, over
    # parameters, gradients and state; no activation policy can reach the budget, and plan
    # said only "no candidate fits" (a 7B Llama `--fake` ledger at 80 GiB, alike)
    from memledger.cli import main
    from memledger.trace.session import trace_script

    script = tmp_path / "big_params.py"
    script.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.blocks = torch.nn.ModuleList(torch.nn.Linear(512, 512) for _ in range(4))\n"
        "    def forward(self, x):\n"
        "        for b in self.blocks:\n"
        "            x = torch.relu(b(x))\n"
        "        return x\n"
        "m = M()\n"
        "opt = torch.optim.Adam(m.parameters(), foreach=True)\n"
        "for _ in range(3):\n"
        "    m(torch.randn(1, 512)).sum().backward()\n"
        "    opt.step()\n"
        "    opt.zero_grad()\n")
    res = trace_script(script, [], tmp_path / "b.ledger", steps=2, measure=False)
    assert main(["plan", str(res.ledger_path), "--budget", "1MiB"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "; the peak is inside optimizer.step(): " in err
    assert "`foreach=False` in the optimizer makes them one parameter's at a time" in err
    # 4 x (512 x 512 + 512) x 4 B = 4,202,496 B of parameters, as much of gradients, twice
    # that of Adam's moments, and its 4 step counters: 16,809,984 + 16 B
    assert err.endswith("; the parameters, their gradients and the optimizer's state alone "
                        "are 16.0 MiB, over the budget")
