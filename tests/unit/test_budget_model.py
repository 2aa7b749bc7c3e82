"""Budget values: sizes echoed as written, increases, durations, and the bad-input lines."""

from __future__ import annotations

import pytest

from memledger.budget import build_budget
from memledger.budget.sizes import Increase, to_increase
from memledger.errors import BudgetError


def test_binary_and_decimal_units_are_never_confused():
    b = build_budget({"peak": "2GB", "categories": {"activation": "2GiB"}}, "t")
    assert b.peak.bytes == 2_000_000_000                      # GB = 10^9
    assert b.categories["activation"].bytes == 2 * 2**30      # GiB = 2^30 = 2147483648
    # echoed back as written; a decimal unit gets its binary reading beside it
    assert str(b.peak) == "2GB (= 1.9 GiB)"                   # 2e9 / 2^30 = 1.86
    assert str(b.categories["activation"]) == "2GiB"


def test_fractional_binary_size():
    b = build_budget({"peak": "1.5GiB"}, "t")
    assert b.peak.bytes == 1_610_612_736                      # 1.5 * 2^30


@pytest.mark.parametrize("value, says", [
    ("800", "size '800' has no unit; write 800MiB"),
    (800, 'size 800 has no unit; write "800MiB"'),
    (800.5, "size 800.5 has no unit; write 800.5MiB"),
    ("-1GiB", "size '-1GiB' is negative"),
    ("2XB", "unknown unit 'XB'"),
])
def test_bad_sizes_say_what_to_write(value, says):
    with pytest.raises(BudgetError) as e:
        build_budget({"peak": value}, "budget.toml")
    msg = str(e.value)
    assert msg.startswith("memledger: budget.toml: peak: ")
    assert says in msg
    assert "\n" not in msg


def test_unknown_category_and_phase_are_named():
    with pytest.raises(BudgetError) as e:
        build_budget({"categories": {"activations": "1MiB"}, "phases": {"backwards": "1MiB"}},
                     "f.toml")
    lines = str(e.value).splitlines()
    assert len(lines) == 2                                    # one line per problem
    assert lines[0].startswith("memledger: f.toml: categories: unknown category 'activations'")
    assert "activation" in lines[0] and "optimizer_state" in lines[0]
    assert lines[1].startswith("memledger: f.toml: phases: unknown phase 'backwards'")


def test_unknown_keys_one_line_each_with_allowed_keys():
    with pytest.raises(BudgetError) as e:
        build_budget({"peek": "1MiB", "baseline": {"max_increase": "5%", "ledgr": "x"}}, "f")
    lines = str(e.value).splitlines()
    assert sorted(lines) == [
        "memledger: f: unknown key 'baseline.ledgr'; allowed here: ledger, max_increase",
        "memledger: f: unknown key 'peek'; allowed here: steps, peak, categories, phases, "
        "baseline, step_time, fake, device",
    ]


def test_increase_percent_is_exact_integer_arithmetic():
    inc = to_increase("5%")
    assert isinstance(inc, Increase) and inc.percent == 5.0
    assert inc.allowed(1000) == 1050                          # 1000 + 1000*5/100
    assert inc.allowed(1019) == 1069                          # 1019 + floor(50.95)
    assert to_increase("2.5%").allowed(1000) == 1025          # 1000 + 25
    assert to_increase("1MiB").allowed(1000) == 1000 + 2**20


@pytest.mark.parametrize("value, says", [
    ("5", "increase '5' has no unit; write 5% or 5MiB"),
    ("-5%", "negative"),
])
def test_bad_increase(value, says):
    with pytest.raises(BudgetError) as e:
        build_budget({"baseline": {"max_increase": value}}, "f")
    assert says in str(e.value)


def test_step_time_and_tolerance():
    b = build_budget({"step_time": {"max": "250ms", "tolerance": "20%"}}, "f")
    assert b.step_time.max.seconds == pytest.approx(0.25)
    assert b.step_time.tolerance == pytest.approx(0.20)
    assert build_budget({"step_time": {"max": "1.5s"}}, "f").step_time.tolerance == 0.10
    with pytest.raises(BudgetError, match="duration '1' has no unit; write 1s or 1ms"):
        build_budget({"step_time": {"max": "1"}}, "f")
    with pytest.raises(BudgetError, match="tolerance 20 must be a percentage"):
        build_budget({"step_time": {"max": "1s", "tolerance": 20}}, "f")


def test_a_wrong_phase_is_refused_in_one_line_naming_every_phase_a_budget_takes():
    """Note [Budget phases: the reported ones and the passes outside the step]
    (budget/model.py): the seven phases and `backward_outside_step`, which `show` reports
    and a budget now takes (before: refused as an unknown phase)."""
    from memledger.budget.marker import budget_from_marker

    assert build_budget({"phases": {"backward_outside_step": "1MiB"}}, "f").phases[
        "backward_outside_step"].bytes == 1 << 20
    marked, _ = budget_from_marker((), {"phases": {"backward_outside_step": "2MiB"}})
    assert marked.phases["backward_outside_step"].bytes == 2 << 20
    with pytest.raises(BudgetError) as e:
        build_budget({"phases": {"evaluation": "1MiB"}}, "f.toml")
    assert str(e.value) == ("memledger: f.toml: phases: unknown phase 'evaluation'; known: "
                            "setup, forward, loss, backward, optimizer, zero_grad, other, "
                            "backward_outside_step")
