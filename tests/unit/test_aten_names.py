"""predict refuses a selective save list naming an op selective never sees, in measure's
line, from torch-free lists of aten names (Note [Save names predict checks without torch],
memledger/replay/aten_names.py); the lists agree with the torch installed."""

import json
import textwrap

import pytest
import torch
from torch import nn

from memledger.cli import main
from memledger.errors import PolicyError
from memledger.measure.apply import _check_save_ops, apply_policy
from memledger.replay.policies import parse_policy
from test_report_html import tiny_records  # tests/unit is on sys.path


def _lists() -> tuple[list[str], list[str]]:
    """The installed torch's aten names, split as measure splits them (run this file with
    `python tests/unit/test_aten_names.py` to print both blocks for aten_names.py)."""
    names = sorted({n.split("::", 1)[1].split(".")[0]
                    for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")})
    seen, broken = [], []
    for n in names:
        try:
            _check_save_ops("p", (n,))
            seen.append(n)
        except PolicyError as e:
            if "never reaches" in str(e):
                broken.append(n)
    return seen, broken


def test_the_lists_are_the_installed_torch_s():
    from memledger.replay import aten_names

    if not torch.__version__.startswith(aten_names.TORCH_VERSION):
        pytest.skip(f"the lists are torch {aten_names.TORCH_VERSION}'s; regenerate them")
    seen, broken = _lists()
    assert sorted(aten_names.reaches_dispatch()) == seen
    assert sorted(aten_names.broken_up_first()) == broken


def _ledger(tmp_path, torch_version: str = torch.__version__) -> str:
    recs = tiny_records()
    recs[0] = {**recs[0], "torch": torch_version}   # the torch that traced it
    recs.insert(-1, {"k": "scope", "mod": "fc", "ev0": 1, "ev1": 2, "ph": "forward",
                     "step": 1, "ns": 1000})     # fc's forward call: what a policy selects
    path = tmp_path / "t.ledger"
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    return str(path)


@pytest.mark.parametrize("name", ["einsum", "matmul", "conv2d", "fooo"])
def test_predict_refuses_what_measure_refuses_in_the_same_line(tmp_path, capsys, name):
    """cliffordlayers' Fourier layer multiplies modes by `torch.einsum`: `selective:...:
    save=_fft_c2c,einsum,bmm` was priced by predict (einsum keeping nothing) and refused by
    measure (tests/clients/test_clifford_clients.py). Now predict exits 2 with measure's
    line, and the names it does not refuse still read the "no op ran" note."""
    policy = f"selective:fc:save=mm,{name}"
    with pytest.raises(PolicyError) as measured:
        apply_policy(_FcModel(), parse_policy(policy))
    assert main(["predict", _ledger(tmp_path), "-p", policy]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert str(measured.value) in err
    assert f"save={name}" in str(measured.value)


class _FcModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x)


def test_an_op_that_reaches_dispatch_but_never_ran_is_priced_with_a_note(tmp_path, capsys):
    assert main(["predict", _ledger(tmp_path), "-p", "selective:fc:save=bmm"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "save=bmm: no op of that name ran in the traced steps" in out


if __name__ == "__main__":
    for block in _lists():
        print(textwrap.fill(" ".join(block), 92, break_on_hyphens=False,
                            break_long_words=False), end="\n\n")


@pytest.mark.parametrize("name", ["einsum", "fooo"])
def test_a_ledger_another_torch_traced_is_not_checked_against_these_lists(tmp_path, capsys,
                                                                          name):
    """The lists are one torch's ops; a ledger traced under another (the GPU machines run
    2.11) may name ops this one lacks or breaks up otherwise: predict prices it, with the
    "no op ran" note, and leaves the refusal to measure, which asks the torch it runs."""
    policy = f"selective:fc:save=mm,{name}"
    assert main(["predict", _ledger(tmp_path, "2.11.0+cu128"), "-p", policy]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"save={name}: no op of that name ran in the traced steps" in out
