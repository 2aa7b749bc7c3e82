"""The pure parts of distributed tracing: rank file names, FSDP labels, the pointer-counted
allocator peak, the resize watch, and ledgers written before sharding existed."""

from __future__ import annotations

import json

import pytest
import torch

from memledger.errors import LedgerFormatError
from memledger.ledger.model import Ledger
from memledger.ledger.ranks import find_rank_files, rank_file, rank_file_template, ranks_json
from memledger.trace.allocator import pointer_peak
from memledger.trace.resize import StorageResizeWatch
from memledger.trace.sharding import fsdp_unit, local_tensor


def test_rank_files_sit_beside_the_name_asked_for(tmp_path):
    assert rank_file("out/run.ledger", 3).as_posix() == "out/run.rank3.ledger"
    assert rank_file("run", 0).as_posix() == "run.rank0"
    assert rank_file_template("a/run.ledger").endswith("a/run.rank{rank}.ledger")
    for r in (1, 0, 10):
        (tmp_path / f"run.rank{r}.ledger").write_text("")
    with pytest.raises(LedgerFormatError, match="rank 2 missing"):
        find_rank_files(tmp_path / "run.ledger")
    for r in range(2, 10):
        (tmp_path / f"run.rank{r}.ledger").write_text("")
    found = find_rank_files(tmp_path / "run.ledger")
    assert [f.name for f in found][:3] == ["run.rank0.ledger", "run.rank1.ledger",
                                           "run.rank2.ledger"] and len(found) == 11
    (tmp_path / "run.ledger").write_text("")   # a one-process ledger under the name wins
    assert find_rank_files(tmp_path / "run.ledger") == []


def test_ranks_json_puts_the_worst_rank_on_top():
    per_rank = [{"schema": "s", "peak_bytes": 10}, {"schema": "s", "peak_bytes": 30}]
    d = ranks_json(per_rank, 1, {"spread_bytes": 20})
    assert d["peak_bytes"] == 30 and d["worst_rank"] == 1 and d["ranks"] == per_rank


@pytest.mark.parametrize("label, unit", [
    ("FSDP::all_gather (blocks.1)", "blocks.1"),
    ("FSDP::forward_prefetch for blocks.2", "blocks.2"),
    ("FSDP::post_backward_reduce", ""),        # the root unit has no fqn
    ("Optimizer.step#AdamW.step", None),
])
def test_fsdp_unit_from_record_function_labels(label, unit):
    assert fsdp_unit(label) == unit


def test_plain_tensors_are_their_own_local_tensor():
    t = torch.zeros(3)
    assert local_tensor(t) is t and local_tensor(torch.nn.Parameter(t)) is not None


def test_pointer_peak_drops_a_block_whose_free_was_never_reported():
    # (time, ptr, ±bytes, inside a c10d op, thread); blocks 4,096 B apart never overlap
    allocs = [
        (1, 0xA000, 1000, False, 1),
        (2, 0xB000, 500, True, 1),      # a collective's own buffer
        (3, 0xB000, -500, True, 1),
        (4, 0xC000, 800, False, 2),     # made on gloo's thread: a collective's too
        (5, 0xC000, 800, False, 2),     # 0xC000 again, never freed: the first one went unseen
        (6, 0xA000, -1000, False, 1),
    ]
    # live: 1000, 1500 (500 of it collective), 1000, 1800 (the peak: 800 collective),
    # 1800 again (the unseen free, then the new block), 800
    assert pointer_peak(allocs) == {"peak_bytes": 1800, "collective_at_peak_bytes": 800,
                                    "collective_peak_bytes": 800, "unseen_frees": 1}


def test_pointer_peak_drops_a_live_block_that_a_new_one_overlaps():
    # DDP's 482,304 B flat broadcast buffer, freed on gloo's thread (no event); malloc then
    # hands out 8,192 B inside it: that block was free, so it leaves the count
    allocs = [
        (1, 0x10000, 482_304, False, 1),
        (2, 0x10000 + 4_096, 8_192, False, 1),   # inside [0x10000, 0x10000 + 482,304)
        (3, 0x90000, 100_000, False, 1),         # beyond it: 0x90000 > 0x10000 + 482,304
    ]
    # live: 482,304 (the peak), 8,192, 108,192
    assert pointer_peak(allocs) == {"peak_bytes": 482_304, "collective_at_peak_bytes": 0,
                                    "collective_peak_bytes": 0, "unseen_frees": 1}
    # a block that ends exactly where the new one starts does not overlap it
    edge = [(1, 0x1000, 4_096, False, 1), (2, 0x2000, 4_096, False, 1)]   # 0x1000 + 4,096
    assert pointer_peak(edge)["peak_bytes"] == 8_192 and pointer_peak(edge)["unseen_frees"] == 0


def test_pointer_peak_orders_a_free_before_an_allocation_of_the_same_tick():
    # 0xA000 freed and handed out again at t=2: a reuse, not an unseen free
    allocs = [(1, 0xA000, 1000, False, 1), (2, 0xA000, 700, False, 1), (2, 0xA000, -1000, False, 1)]
    assert pointer_peak(allocs)["peak_bytes"] == 1000
    assert pointer_peak(allocs)["unseen_frees"] == 0


def test_resize_watch_sees_resizes_and_puts_the_method_back():
    seen = []
    st = torch.zeros(4).untyped_storage()            # 16 B
    with StorageResizeWatch(lambda s, old, new: seen.append((old, new))):
        st.resize_(0)
        st.resize_(16)
    st.resize_(8)                                     # after the block: not seen
    assert seen == [(16, 0), (0, 16)]
    assert "resize_" not in torch.UntypedStorage.__dict__


def test_resize_watches_that_end_in_the_order_they_began_put_the_method_back():
    # two blocks in two threads: A in, B in, A out, B out. B had wrapped A's wrapper and
    # put it back on exit, so A's wrapper (and its collector) stayed on resize_ for good
    seen = []
    st = torch.zeros(4).untyped_storage()            # 16 B
    a = StorageResizeWatch(lambda s, old, new: seen.append(("a", old, new)))
    b = StorageResizeWatch(lambda s, old, new: seen.append(("b", old, new)))
    a.__enter__()
    b.__enter__()
    st.resize_(0)
    a.__exit__(None, None, None)
    st.resize_(16)
    b.__exit__(None, None, None)
    st.resize_(8)                                     # after both: not seen
    assert seen == [("a", 16, 0), ("b", 16, 0), ("b", 0, 16)]
    assert "resize_" not in torch.UntypedStorage.__dict__


def test_ledgers_before_sharding_read_with_no_shard():
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "alloc", "sid": 0, "ev": 0, "bytes": 64},
            {"k": "role", "sid": 0, "role": "parameter", "name": "w"},
            {"k": "end", "ev": 1, "status": "ok"}]
    led = Ledger.from_records(json.loads(json.dumps(recs)))
    assert led.storages.loc[0, "shard"] == "" and led.storages.loc[0, "category"] == "parameter"
    s = led.summary()
    assert s.parameter_shards == {"full": 64} and s.rank is None
    assert "rank" not in s.to_json_dict()


def test_communication_role_yields_to_gradient():
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "alloc", "sid": 0, "ev": 0, "bytes": 64, "ph": "backward"},
            {"k": "role", "sid": 0, "role": "communication"},
            {"k": "role", "sid": 0, "role": "gradient", "name": "w"},   # reduce-scatter output
            {"k": "alloc", "sid": 1, "ev": 0, "bytes": 32, "ph": "backward"},
            {"k": "role", "sid": 1, "role": "communication"},
            {"k": "end", "ev": 1, "status": "ok"}]
    led = Ledger.from_records(recs)
    assert list(led.storages["category"]) == ["gradient", "communication"]


def test_a_gloo_ranks_gap_stays_at_its_moment():
    """Note [A gloo rank's gap] (replay/prepared.py): on one process the allocator - ledger
    gap is carried to every policy's peak; on a CPU rank it is gloo's buffers at the traced
    peak's moment, so a policy whose peak is elsewhere does not carry it."""
    from memledger.ledger.model import Ledger
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    from plan_ledgers import blocks_records

    def led(rank: bool) -> Ledger:
        recs = blocks_records([100_000, 300_000], [150_000, 20_000])
        base = Ledger.from_records(recs).peak().bytes
        if rank:
            recs[0] = {**recs[0], "rank": 0, "world_size": 2}
        return Ledger.from_records(recs + [{"k": "measured", "source": "cpu-profiler",
                                            "device": "cpu", "peak_bytes": base + 50_000,
                                            "collective_at_peak_bytes": 50_000}])

    pol = [parse_policy("checkpoint:blocks.*")]
    one, ranked = predict(led(False), pol), predict(led(True), pol)
    # the baseline predicts the allocator's peak either way
    assert one.baseline_peak_bytes == ranked.baseline_peak_bytes == \
        led(False).measured["peak_bytes"]
    # checkpointing moves the peak into backward: the rank's prediction is the replay's
    p1, pr = one.policies[0], ranked.policies[0]
    assert p1.peak_bytes == pr.peak_bytes + 50_000
    assert (one.collective_bytes, ranked.collective_bytes) == (0, 50_000)
