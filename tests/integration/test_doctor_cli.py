"""`memledger doctor` through the real CLI and a fresh worker (Collector + probe), and the
findings carried by show, report, check and compare. A few runs only: each check's own
planted bug is tested in-process in test_doctor_scripts.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memledger.cli import main

SCRIPTS = Path(__file__).resolve().parents[1] / "doctor"
CUT = SCRIPTS / "cut.py"
# `h = h.detach()` in tests/doctor/cut.py
DETACH_LINE = next(i for i, t in enumerate(CUT.read_text().splitlines(), 1)
                   if t.strip() == "h = h.detach()")


@pytest.fixture(scope="module")
def doctored(tmp_path_factory):
    """`memledger doctor cut.py --json -o cut.ledger`: (exit code, JSON, ledger path)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("doctor") / "cut.ledger"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["doctor", str(CUT), "--steps", "2", "--json", "-o", str(out)])
    return code, json.loads(buf.getvalue()), out


def test_doctor_json_names_the_cut_and_its_line(doctored):
    code, d, _ = doctored
    assert code == 1
    assert d["schema"] == "memledger.doctor/1" and d["ok"] is False and d["steps"] == 2
    (f,) = d["findings"]
    assert f["check"] == "cut_graph" and f["severity"] == "error"
    assert f["where"] == {"file": str(CUT), "line": DETACH_LINE}
    assert CUT.read_text().splitlines()[DETACH_LINE - 1].strip().startswith("h = h.detach()")
    # blocks.0: weight 8x8 + bias 8 fp32 = (64 + 8) * 4 = 288 bytes without a gradient;
    # blocks.1 and head (8x8+8 and 2x8+2 = 4 tensors) got theirs
    assert f["evidence"] == {"params_without_grad": 2, "params_with_grad": 4,
                             "bytes_without_grad": 288, "steps": [1, 2]}


def test_the_ledger_carries_the_findings_to_show_report_and_check(doctored, tmp_path, capsys):
    _, _, ledger = doctored
    capsys.readouterr()
    assert main(["show", str(ledger), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "memledger.summary/1" and d["steps_traced"] == 2
    assert d["doctor"]["findings"][0]["check"] == "cut_graph"
    assert main(["report", str(ledger), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Doctor: 1 finding (1 error)" in page and "cut_graph" in page
    # a budget alone passes (the findings are shown); --no-findings fails on them
    assert main(["check", str(ledger), "--budget", "1GiB"]) == 0
    assert "ERROR cut_graph" in capsys.readouterr().out
    assert main(["check", str(ledger), "--budget", "1GiB", "--no-findings"]) == 1
    assert "--no-findings asks for none" in capsys.readouterr().err


def test_check_no_findings_needs_a_doctored_ledger(tmp_path, capsys):
    from memledger.ledger.writer import FileSink

    plain = tmp_path / "plain.ledger"
    sink = FileSink(plain)
    sink.write({"k": "header", "schema": "memledger.ledger/1"})
    sink.write({"k": "end", "ev": 0, "status": "ok", "message": "", "steps": 0})
    sink.close()
    assert main(["check", str(plain), "--no-findings"]) == 2
    assert "holds no doctor findings" in capsys.readouterr().err


def test_fixed_script_exits_0_and_failing_script_exits_3(tmp_path, capsys):
    assert main(["doctor", str(CUT), "--steps", "1", "--", "--fixed"]) == 0
    assert "no findings" in capsys.readouterr().out
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    assert main(["doctor", str(broken)]) == 3
    assert "boom" in capsys.readouterr().err
    assert main(["doctor", str(tmp_path / "missing.py")]) == 2


def test_compare_stops_on_a_baseline_doctor_error_before_any_policy(capsys):
    code = main(["compare", str(CUT), "-p", "checkpoint:blocks.*", "--steps", "1",
                 "--no-performance"])
    err = capsys.readouterr().err
    assert code == 1
    assert "the baseline fails the doctor, so no policy is judged: cut_graph at " \
           f"{CUT}:{DETACH_LINE}" in err
    assert "gates:" not in err    # no capture ran


def test_the_doctors_ledger_frees_a_dropped_copy_as_the_trace_does(tmp_path, capsys):
    """Note [Parameters held weakly] (trace/doctor_probe.py): an evaluation copy made and
    dropped each step (`garbage.py --cycle snapshot --fixed`: deepcopy, a no_grad forward,
    no cycle) was kept alive by the probe, every copy of it, so `doctor -o` recorded a
    ledger that never freed them: a peak of 2,367,496 B against the trace's 1,841,156 (a
    copy is 2 x (256x256 + 256) float32 = 526,336 B). Now the same peak, to the byte."""
    script, args = str(SCRIPTS / "garbage.py"), ["--", "--cycle", "snapshot", "--fixed"]
    doctored, traced = tmp_path / "d.ledger", tmp_path / "t.ledger"
    assert main(["doctor", "--steps", "3", "-o", str(doctored), script, *args]) == 0
    assert main(["trace", "--steps", "3", "--no-measure", "-o", str(traced), script,
                 *args]) == 0
    peaks = []
    for ledger in (doctored, traced):
        capsys.readouterr()
        assert main(["show", str(ledger), "--json"]) == 0
        peaks.append(json.loads(capsys.readouterr().out)["peak"]["bytes"])
    assert peaks[0] == peaks[1]
