"""Note [The longest tests first] (tests/conftest.py): the tests marked `slow` are dealt
round xdist's first chunks, each worker's first chunk starting with its share of them."""

from __future__ import annotations

from tests.conftest import longest_first, pytest_collection_modifyitems


def _first_chunks(order: list[str], workers: int) -> list[list[str]]:
    """What xdist 3.8's LoadScheduling hands each worker first: consecutive chunks of
    len // 4 // workers tests."""
    chunk = max(len(order) // workers // 4, 2)
    return [order[k * chunk:(k + 1) * chunk] for k in range(workers)]


def test_three_workers_each_start_on_their_share_of_the_slow_tests():
    # 42 quick tests collected first, then 6 slow ones (tests/unit is collected last)
    items = [f"q{i}" for i in range(42)] + [f"s{i}" for i in range(6)]
    order = longest_first(items, lambda t: t.startswith("s"), workers=3)
    # chunk = 48 // 3 // 4 = 4: two slow tests and the next two quick ones each
    assert order[:12] == ["s0", "s3", "q0", "q1", "s1", "s4", "q2", "q3",
                          "s2", "s5", "q4", "q5"]
    assert order[12:] == [f"q{i}" for i in range(6, 42)]
    assert sorted(order) == sorted(items)   # every test kept, once
    assert [sum(t.startswith("s") for t in c) for c in _first_chunks(order, 3)] == [2, 2, 2]
    # as collected, one worker's first chunk held them all, and two held none
    assert [sum(t.startswith("s") for t in c) for c in _first_chunks(items, 3)] == [0, 0, 0]


def test_one_process_runs_the_slow_tests_first_and_none_leaves_the_order_alone():
    items = ["q0", "s0", "q1", "s1", "q2"]
    assert longest_first(items, lambda t: t.startswith("s"), workers=1) == \
        ["s0", "s1", "q0", "q1", "q2"]
    assert longest_first(items, lambda t: False, workers=3) == items


class _Item:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self.name.startswith("s") else None


def test_the_hook_deals_by_the_slow_mark_and_xdists_worker_count(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    items = [_Item(n) for n in [f"q{i}" for i in range(16)] + ["s0", "s1"]]
    pytest_collection_modifyitems(None, items)
    # chunk = 18 // 2 // 4 = 2: one slow test and one quick one each
    assert [i.name for i in items[:4]] == ["s0", "q0", "s1", "q1"]
    assert len(items) == 18
