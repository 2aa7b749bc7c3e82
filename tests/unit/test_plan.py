"""`plan`: candidates on the repeated blocks, chosen by replay."""

from memledger.replay.plan import _selector, candidates

BLOCKS = [f"blocks.{i}" for i in range(4)]


def test_candidates_for_four_blocks():
    texts = [str(p) for p in candidates(BLOCKS)]
    # none + 3 kinds × 4 prefixes + checkpoint-k/offload-j pairs (k + j <= 4: 3 + 2 + 1 = 6)
    assert len(texts) == 1 + 3 * 4 + 6
    assert texts[:5] == ["none", "checkpoint:blocks.0", "checkpoint:blocks.[0-1]",
                         "checkpoint:blocks.[0-2]", "checkpoint:blocks.*"]
    assert "checkpoint:blocks.[0-1]+offload:blocks.[2-3]" in texts


def test_selectors_stay_short_and_exact():
    assert _selector(BLOCKS, BLOCKS) == "blocks.*"
    assert _selector(BLOCKS[1:3], BLOCKS) == "blocks.[1-2]"
    many = [f"h.{i}" for i in range(12)]
    assert _selector(many[8:11], many) == ""        # 8..10 is not one character class
