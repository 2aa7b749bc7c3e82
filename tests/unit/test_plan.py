"""`plan`: selectors for the chosen blocks stay short and exact."""

from memledger.replay.plan import _selectors

BLOCKS = [f"blocks.{i}" for i in range(4)]


def test_selectors_stay_short_and_exact():
    assert _selectors(BLOCKS, BLOCKS) == ["blocks.*"]
    assert _selectors(BLOCKS[1:3], BLOCKS) == ["blocks.[1-2]"]
    assert _selectors([BLOCKS[0], BLOCKS[2]], BLOCKS) == ["blocks.[02]"]
    many = [f"h.{i}" for i in range(24)]
    # 8..10 crosses a tens digit: one class per tens
    assert _selectors(many[8:11], many) == ["h.[8-9]", "h.10"]
    assert _selectors([many[i] for i in (10, 11, 14, 23)], many) == ["h.1[014]", "h.23"]
