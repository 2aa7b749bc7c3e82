"""`memledger check` through the real CLI: exit codes 0/1/2, JSON, JUnit, Markdown, baseline.

One ledger of the MLP example (2 steps, with the allocator pass) is traced once per session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from memledger.cli import main
from memledger.ledger.reader import read_records

ROOT = Path(__file__).resolve().parents[2]
MEMLEDGER = [sys.executable, "-m", "memledger"]
# its `memledger` runs fork their workers from this process's zygote (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("cli_zygote")


@pytest.fixture(scope="session")
def mlp_ledger(trace_example) -> Path:
    return trace_example("mlp", steps=2)


@pytest.fixture(scope="session")
def mlp_peak(mlp_ledger) -> int:
    from memledger.ledger.model import Ledger

    m = Ledger.load(mlp_ledger).measured
    assert m is not None and m["source"] == "cpu-profiler"
    return int(m["peak_bytes"])


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*MEMLEDGER, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_exactly_at_budget_exits_0_one_byte_over_exits_1(mlp_ledger, mlp_peak, capsys):
    assert main(["check", str(mlp_ledger), "--budget", f"{mlp_peak}B", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["schema"], d["ok"], d["peak_bytes"]) == ("memledger.check/1", True, mlp_peak)
    assert d["peak_source"] == "allocator (cpu-profiler)" and d["violations"] == []

    assert main(["check", str(mlp_ledger), "--budget", f"{mlp_peak - 1}B", "--json"]) == 1
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is False
    assert d["violations"][0]["limit"] == "peak"
    assert (d["violations"][0]["budget_bytes"], d["violations"][0]["actual_bytes"]) == (
        mlp_peak - 1, mlp_peak)


def test_real_cli_exit_codes_0_1_2(mlp_ledger, mlp_peak, tmp_path):
    ok = run("check", str(mlp_ledger), "--budget", "1GiB")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("PASS ")
    assert "1GiB" in ok.stdout                                     # the budget, echoed as written

    over = run("check", str(mlp_ledger), "--category", "optimizer_state=3MiB")
    assert over.returncode == 1
    # Adam state of 399,370 fp32 parameters (fc1 131,584 + fc2 262,656 + head 5,130):
    # exp_avg + exp_avg_sq = 2 x 4 B x 399,370 = 3,194,960 B, plus one fp32 step counter per
    # parameter tensor, 6 x 4 B = 24 B: 3,194,984 B > 3 MiB = 3,145,728 B by 49,256 B
    assert "optimizer_state 3.0 MiB > budget 3.0 MiB" not in over.stdout  # exact when alike
    assert "optimizer_state 3,194,984 B > budget 3,145,728 B by 49,256 B" in over.stdout
    assert "fc2.weight.exp_avg 512x512 1.0 MiB" in over.stdout      # the top tensor, named
    assert "memledger: over budget: 1 of 1 limit exceeded (category:optimizer_state)" \
        in over.stderr

    bad = run("check", str(mlp_ledger), "--budget", "800")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("memledger: flags: peak: size '800' has no unit; "
                                  "write 800MiB, 800GiB or 800B")


@pytest.mark.parametrize("args, says", [
    (["--category", "activations=1MiB"], "unknown category 'activations'"),
    (["--category", "activation"], "must read NAME=SIZE"),
    (["--budget", "-1GiB"], "is negative"),
    (["--baseline", "{ledger}"], "baseline.max_increase is required with a baseline: "
                                 "--max-increase 5%"),
    (["--step-time-tolerance", "5%"], "step_time.max is required: --step-time 900ms"),
    (["--config", "{missing}"], "no budget file at"),
    ([], "no limit to check"),
])
def test_bad_input_exits_2(mlp_ledger, tmp_path, capsys, args, says):
    args = [a.format(ledger=mlp_ledger, missing=tmp_path / "nope.toml") for a in args]
    assert main(["check", str(mlp_ledger), *args]) == 2
    err = capsys.readouterr().err
    assert says in err and err.startswith("memledger:")


def test_unknown_keys_in_a_budget_file_one_line_each(mlp_ledger, tmp_path, capsys):
    cfg = tmp_path / "b.toml"
    cfg.write_text('peak = "1GiB"\nactivation = "1MiB"\n[phases]\nbackwards = "1MiB"\n')
    assert main(["check", str(mlp_ledger), "--config", str(cfg)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith(f"memledger: {cfg}: ") for line in lines)


def test_not_a_ledger_exits_2(tmp_path, capsys):
    p = tmp_path / "x.ledger"
    p.write_text("hello\n")
    assert main(["check", str(p), "--budget", "1GiB"]) == 2
    assert "is not a memledger ledger" in capsys.readouterr().err


def test_baseline_regression_and_other_model(mlp_ledger, tmp_path, capsys):
    # the same ledger as its own baseline: growth 0 B passes even at 0%
    assert main(["check", str(mlp_ledger), "--baseline", str(mlp_ledger),
                 "--max-increase", "0%"]) == 0
    capsys.readouterr()
    # a baseline whose allocator peak is just over 5% lower: the same file with its measured
    # record rewritten, so the current peak m > base + floor(base * 5 / 100)
    from memledger.ledger.model import Ledger

    m = Ledger.load(mlp_ledger).measured["peak_bytes"]
    lines = mlp_ledger.read_text().splitlines()
    base_peak = (m * 100) // 105 - 1                                 # current > base * 1.05
    lines = [ln if '"k":"measured"' not in ln.replace(" ", "")
             else json.dumps({"k": "measured", "source": "cpu-profiler", "device": "cpu",
                              "peak_bytes": base_peak}) for ln in lines]
    base = tmp_path / "base.ledger"
    base.write_text("\n".join(lines) + "\n")
    assert main(["check", str(mlp_ledger), "--baseline", str(base), "--max-increase", "5%",
                 "--json"]) == 1
    (v,) = json.loads(capsys.readouterr().out)["violations"]
    assert v["limit"] == "baseline"
    assert v["budget_bytes"] == base_peak + (base_peak * 5) // 100
    assert v["actual_bytes"] == m

    # a baseline of another model is refused: exit 2, said plainly
    other = tmp_path / "other.ledger"
    other.write_text(mlp_ledger.read_text().replace('"name":"fc1.weight"', '"name":"enc.weight"')
                     .replace('"name": "fc1.weight"', '"name": "enc.weight"'))
    assert main(["check", str(mlp_ledger), "--baseline", str(other),
                 "--max-increase", "5%"]) == 2
    assert "is from another model: the parameter sets differ" in capsys.readouterr().err


@pytest.mark.slow
def test_script_with_budget_file_writes_junit_and_markdown(tmp_path):
    junit, md, led = tmp_path / "m.xml", tmp_path / "m.md", tmp_path / "run.ledger"
    r = run("check", "examples/train_mlp.py", "--config", "configs/budget_mlp.toml",
            "--junit", str(junit), "--markdown", str(md), "-o", str(led), "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert d["ok"] is True and d["steps_traced"] == 2                # steps = 2 in the file
    assert d["budget_sources"] == ["configs/budget_mlp.toml"]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("2", "0")
    assert [c.get("name") for c in suite.iter("testcase")] == [
        "peak", "category:optimizer_state"]
    assert md.read_text().startswith("### memledger budget: ✅ within budget")
    assert led.exists()                                              # -o keeps the ledger
    # a check reads peaks, not policy costs: no timed steps, probes or calibration (Note
    # [Memory-only traces]); the allocator's peak is there
    kinds = {r["k"] for r in read_records(led)[0]}
    assert "measured" in kinds and not kinds & {"timing", "calibration"}


def test_example_ci_workflow_checks_a_bundled_budget():
    """The GitHub Actions example runs `memledger check` on files that exist, with the
    reports the issue asks for (parsed as text: no YAML dependency)."""
    text = (ROOT / "examples" / "ci" / "memledger.yml").read_text()
    (cmd,) = [line.strip().rstrip("\\").strip() for line in text.splitlines()
              if line.strip().startswith("memledger check examples/")]
    words = cmd.split()
    assert (ROOT / words[2]).is_file()                              # the script
    assert (ROOT / words[words.index("--config") + 1]).is_file()    # the budget file
    assert "--junit memledger-junit.xml" in text and "--markdown memledger-summary.md" in text
    assert "actions/upload-artifact" in text and "GITHUB_STEP_SUMMARY" in text


def test_a_failing_script_is_not_said_to_leave_a_ledger_in_checks_own_folder(tmp_path):
    """check traces into a temporary folder unless -o is given: the message once said the
    partial ledger was kept there, in a folder gone by the time it was read."""
    script = tmp_path / "boom.py"
    script.write_text('raise SystemExit("boom")\n')
    r = run("check", str(script), "--budget", "1GiB", cwd=tmp_path)
    assert r.returncode == 3
    assert "memledger-check-" not in r.stderr and "-o FILE" in r.stderr, r.stderr


def test_json_on_a_usage_error_is_one_json_document(tmp_path, mlp_ledger):
    """`check --json` with a bad flag printed nothing on stdout: a CI step parsing it read
    empty input. Now one document says what went wrong; a verdict is still the only one."""
    r = run("check", str(mlp_ledger), "--budget", "800", "--json", cwd=tmp_path)
    d = json.loads(r.stdout)
    assert r.returncode == 2 and d["ok"] is False and d["exit_code"] == 2
    assert "has no unit" in d["error"]
    r = run("check", str(mlp_ledger), "--budget", "1B", "--json", cwd=tmp_path)
    assert r.returncode == 1 and json.loads(r.stdout)["ok"] is False   # one document
    # click's own parse errors (a misspelt flag, a missing option) are such errors too
    for argv in (["check", str(mlp_ledger), "--budgett", "1MiB", "--json"],
                 ["plan", str(mlp_ledger), "--json"]):
        r = run(*argv, cwd=tmp_path)
        d = json.loads(r.stdout)
        assert r.returncode == 2 and d == {"ok": False, "exit_code": 2, "error": d["error"]}
    assert "--budgett" in json.loads(run("check", str(mlp_ledger), "--budgett", "1MiB",
                                         "--json", cwd=tmp_path).stdout)["error"]


def test_a_script_that_ends_before_the_steps_asked_is_not_checked(tmp_path):
    """One step of three: its peak has no optimizer state, 25 % under the training peak on
    GPT-2, and `check` passed it. Now exit 2, in the JUnit report too."""
    r = run("check", str(ROOT / "examples" / "train_mlp.py"), "--budget", "1GiB",
            "--junit", str(tmp_path / "j.xml"), "--", "--steps", "1", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "the script ended after 1 of the 3 steps check traces" in r.stderr
    assert "--steps 1" in r.stderr and "<error" in (tmp_path / "j.xml").read_text()


EVAL = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
with torch.no_grad():
    for i in range(4):
        out = model(torch.randn(16, 64))
"""
# parameters: 64*32*4 + 32*4 + 32*8*4 + 8*4 = 9376 bytes; a batch 16*64*4 = 4096 bytes


def test_an_inference_script_is_checked_by_its_forwards(tmp_path, capsys):
    """A script without optimizer.step() was refused with "count steps by forward passes
    (--steps-by forward) or trace the whole script (--steps-by whole)", options `check`
    did not have ("No such option: --steps-by"): an inference script's budget could not
    be checked. Now it takes them, and the doctor of `--no-findings` counts alike."""
    script = tmp_path / "infer.py"
    script.write_text(EVAL)
    assert main(["check", str(script), "--steps-by", "forward", "--steps", "2", "--budget",
                 "1MiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] and 9376 + 4096 <= d["peak_bytes"] < 1 << 20
    assert main(["check", str(script), "--steps-by", "whole", "--budget", "9376B"]) == 1
    capsys.readouterr()
    assert main(["check", str(script), "--steps-by", "forward", "--no-findings",
                 "--budget", "1MiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["doctor"]["ok"] and d["doctor"]["steps_by"] == "forward"


def test_the_phases_a_budget_takes_through_the_cli(mlp_ledger, tmp_path, capsys):
    """Note [Budget phases: the reported ones and the passes outside the step]: a budget
    file and `--phase` take `backward_outside_step` (the MLP runs no pass outside its steps:
    "phase not seen", 0 B, passes); a wrong name is one line listing the eight, exit 2."""
    cfg = tmp_path / "b.toml"
    cfg.write_text('[phases]\nbackward_outside_step = "1B"\n')
    assert main(["check", str(mlp_ledger), "--config", str(cfg), "--json"]) == 0
    [lim] = json.loads(capsys.readouterr().out)["limits"]
    assert (lim["limit"], lim["actual_bytes"], lim["note"]) == \
        ("phase:backward_outside_step", 0, "phase not seen")
    assert main(["check", str(mlp_ledger), "--phase", "eval=1MiB"]) == 2
    assert capsys.readouterr().err == (
        "memledger: flags: phases: unknown phase 'eval'; known: setup, forward, loss, "
        "backward, optimizer, zero_grad, other, backward_outside_step\n")
