"""Budget sources: a TOML file, [tool.memledger.budget] in pyproject.toml, flags on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from memledger.budget import load_budget
from memledger.errors import BudgetError

FILE = """
steps = 2
peak = "40MiB"
[categories]
activation = "26MiB"
gradient = "4MiB"
[phases]
backward = "39MiB"
"""


def test_toml_file(tmp_path):
    p = tmp_path / "budget.toml"
    p.write_text(FILE)
    b, sources = load_budget(p)
    assert sources == [str(p)]
    assert b.steps == 2
    assert b.peak.bytes == 40 * 2**20                          # 41943040
    assert {k: v.bytes for k, v in b.categories.items()} == {
        "activation": 26 * 2**20, "gradient": 4 * 2**20}
    assert b.phases["backward"].bytes == 39 * 2**20


def test_flags_override_key_by_key(tmp_path):
    p = tmp_path / "budget.toml"
    p.write_text(FILE)
    b, sources = load_budget(p, {"peak": "41MiB", "categories": {"activation": "27MiB"}})
    assert sources == [str(p), "flags"]
    assert b.peak.bytes == 41 * 2**20                          # the flag wins
    assert b.categories["activation"].bytes == 27 * 2**20      # the flag wins
    assert b.categories["gradient"].bytes == 4 * 2**20         # the file's other key stays


def test_pyproject_table_found_from_a_subdirectory(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.memledger.budget]\npeak = "1GiB"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    b, sources = load_budget(None, {}, search_from=sub)
    assert b.peak.bytes == 2**30
    assert sources == [f"{(tmp_path / 'pyproject.toml').resolve()} [tool.memledger.budget]"]


def test_pyproject_given_with_config_must_have_the_table(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[project]\nname = "x"\n')
    with pytest.raises(BudgetError, match=r"has no \[tool.memledger.budget\] table"):
        load_budget(p)


def test_pyproject_without_table_is_ignored_when_searching(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    b, sources = load_budget(None, {"peak": "1MiB"}, search_from=tmp_path)
    assert sources == ["flags"] and b.peak.bytes == 2**20


def test_no_limit_at_all_is_refused(tmp_path):
    with pytest.raises(BudgetError, match="no limit to check; pass --budget"):
        load_budget(None, {}, search_from=tmp_path)


def test_missing_config(tmp_path):
    with pytest.raises(BudgetError, match="no budget file at"):
        load_budget(tmp_path / "nope.toml")


def test_config_that_exists_but_cannot_be_read(tmp_path, monkeypatch):
    p = tmp_path / "budget.toml"
    p.write_text(FILE)

    def deny(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", deny)  # as chmod 000 would for a non-root user
    with pytest.raises(BudgetError) as e:
        load_budget(p)
    assert str(e.value) == (f"memledger: cannot read budget file {str(p)!r}: Permission "
                            "denied; check its permissions")


@pytest.mark.parametrize("content, says", [
    (b"peak = \n", "is not valid TOML"),
    (b"\xff\xfe peak", "is not UTF-8 text"),
])
def test_config_that_is_not_toml(tmp_path, content, says):
    p = tmp_path / "budget.toml"
    p.write_bytes(content)
    with pytest.raises(BudgetError, match=says):
        load_budget(p)


def test_unknown_key_in_file_names_file_and_key(tmp_path):
    p = tmp_path / "budget.toml"
    p.write_text('peak = "1GiB"\nactivation = "300MiB"\n')
    with pytest.raises(BudgetError) as e:
        load_budget(p)
    assert str(e.value) == (f"memledger: {p}: unknown key 'activation'; allowed here: steps, "
                            "peak, categories, phases, baseline, step_time, fake, device")


def test_bundled_configs_are_valid():
    root = Path(__file__).resolve().parents[2] / "configs"
    files = sorted(root.glob("budget*.toml"))
    assert files, "configs/budget*.toml should exist"
    for f in files:
        b, _ = load_budget(f)
        assert b.has_limits


def test_baseline_ledger_in_a_file_is_relative_to_the_file(tmp_path):
    d = tmp_path / "ci"
    d.mkdir()
    p = d / "budget.toml"
    p.write_text('[baseline]\nledger = "main.ledger"\nmax_increase = "5%"\n')
    b, _ = load_budget(p)
    assert b.baseline.ledger == d / "main.ledger"
    b, _ = load_budget(p, {"baseline": {"ledger": "other.ledger"}})   # a flag: as given
    assert b.baseline.ledger == Path("other.ledger")
