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


def test_selectors_per_stack():
    """Blocks in two stacks (Note [Stacks beside the blocks]): globs per stack. One list
    of both read the paths' first segment as the index: `encoder.*` or a wrong class."""
    enc, dec = [f"encoder.block.{i}" for i in range(2)], [f"decoder.block.{i}" for i in range(3)]
    assert _selectors(enc + dec, enc + dec) == ["encoder.block.*", "decoder.block.*"]
    assert _selectors(enc + dec[1:], enc + dec) == ["encoder.block.*", "decoder.block.[1-2]"]
    assert _selectors(dec[:1], enc + dec) == ["decoder.block.0"]


def test_selectors_of_top_level_blocks():
    """A model that is an `nn.Sequential` has its blocks at the top (Note [A model that is
    itself a Sequential]): the indices are written out, never `.*` (no such module) nor `*`
    (every top-level module, the embedding and head too)."""
    assert _selectors(["2", "3"], ["2", "3"]) == ["[2-3]"]
    assert _selectors(["3"], ["2", "3"]) == ["3"]


def test_plan_says_which_options_replay_refused():
    """An option replay refuses on a block (selective, where a second backward pass reads
    what the block saved) is named with its reason; plan dropped it in silence."""
    from memledger.ledger.model import Ledger
    from memledger.replay.plan import block_table, repeated_blocks
    from memledger.replay.predict import cost_model
    from memledger.replay.prepared import Prepared

    from plan_ledgers import blocks_records

    recs = blocks_records([100_000, 300_000], [150_000, 20_000])
    recs += [{**r, "ev": r["ev"] + 1} for r in recs if r["k"] == "unpack"]   # read twice
    led = Ledger.from_records(recs)
    prep = Prepared.from_ledger(led)
    model, _ = cost_model(led, prep)
    table = block_table(prep, model, repeated_blocks(led), 0)
    assert set(table.refused) == {"selective"}, table.refused
    assert "backward" in table.refused["selective"]


def test_predict_shows_the_policies_it_can_and_refuses_the_others(tmp_path, capsys):
    """One refused policy among several used to end `predict` before any table (the usual
    checkpoint + offload pair on a transformers model keeping its KV cache printed only the
    refusal): now the others are predicted, the refusal follows in one line, exit 2."""
    import json

    from memledger.cli import main

    from plan_ledgers import blocks_records

    recs = blocks_records([100_000, 300_000], [150_000, 20_000])
    recs += [{**r, "ev": r["ev"] + 1} for r in recs if r["k"] == "unpack"]   # read twice
    path = tmp_path / "twice.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    args = ["predict", str(path), "-p", "selective:blocks.*", "-p", "offload:blocks.*"]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert "offload:blocks.*" in out and "selective:blocks.*" not in out
    assert err.count("\n") == 1 and "selective:blocks.*" in err and "backward" in err
    assert main([*args, "--json"]) == 2
    d = json.loads(capsys.readouterr().out)         # one JSON document, the report
    assert [p["policy"] for p in d["policies"]] == ["offload:blocks.*"]
    assert [r["policy"] for r in d["refused"]] == ["selective:blocks.*"]
    assert main(["predict", str(path), "-p", "selective:blocks.*"]) == 2   # alone: as before
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("memledger: selective:blocks.*")


def test_plan_names_each_blocks_option(tmp_path, capsys):
    """The per-block line prints each option beside its block's path, in the search's order
    (Note [Each block's option, named], commands/plan.py): on the old code it printed the
    options alone ("per block: offload, checkpoint, ..."), which a model whose blocks the
    search holds stack by stack (bidirectional-cross-attention's transformer) read in the
    model's order as the wrong blocks."""
    import json

    from memledger.cli import main

    from plan_ledgers import H8, T8, blocks_records

    path = tmp_path / "blocks.ledger"
    path.write_text("".join(json.dumps(r) + "\n" for r in blocks_records(H8, T8)))
    assert main(["plan", str(path), "--budget", "60%", "--json", "--no-front"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] and len(set(d["choice"])) > 1
    assert main(["plan", str(path), "--budget", "60%", "--no-front"]) == 0
    out = " ".join(capsys.readouterr().out.split())   # the line wraps at 80 columns
    named = ", ".join(f"{b} {c}" for b, c in zip(d["blocks"], d["choice"]))
    assert f"per block: {named} searched" in out
