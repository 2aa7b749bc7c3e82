"""Replay on hand-built ledgers whose answers are known by arithmetic."""

from __future__ import annotations

import pytest

from memledger.ledger.model import Ledger
from memledger.replay.engine import replay
from memledger.replay.policies import parse_policy
from memledger.replay.prepared import Prepared

H = 1000   # bytes saved inside each block (one storage)
Y = 100    # bytes of each block's output


def chain(L: int, late_mm: int = 0, relu_end: bool = False) -> tuple[Ledger, int]:
    """An L-block chain, one step. Block i runs forward on events [1+10i, 11+10i):
    it makes h_i (H bytes, saved by its own op) and its output y_i (Y bytes) on its last
    event; block i+1's first op saves y_i (a save record at the event before, Rule 5).
    Backward runs the blocks in reverse, 10 events each, unpacking h_i and y_{i-1}.
    `late_mm` > 0: each block also makes a temporary of that many bytes by `mm` at
    e0 + 6 (after its last save), freed at e0 + 7.
    `relu_end`: each block ends in a ReLU that saves its own output y_i too (a record at
    e1 - 1 by the block, as the next block's input save is), unpacked first in the block's
    own backward, which frees y_i (a conv after a ReLU across blocks).
    Returns (ledger, last event before backward)."""
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
            {"k": "phase", "ev": 1, "ph": "forward", "step": 1}]
    B = 1 + 10 * L + 1                     # first backward event
    sid = 0
    frees, allocs = [], []
    for i in range(L):
        e0, e1 = 1 + 10 * i, 11 + 10 * i
        u = B + 10 * (L - 1 - i) + 2       # block i's backward unpacks here
        allocs.append({"k": "alloc", "sid": sid, "ev": e0 + 1, "bytes": H, "dev": "cpu",
                       "op": "mul.Tensor", "mod": f"blocks.{i}", "ph": "forward", "step": 1})
        recs += [{"k": "saved", "sid": sid, "ev": e0 + 2, "mod": f"blocks.{i}"},
                 {"k": "unpack", "sid": sid, "ev": u}, {"k": "fwdlast", "sid": sid, "last": e0 + 3}]
        frees.append({"k": "free", "sid": sid, "ev": u + 1, "last": u})
        sid += 1
        if late_mm:
            allocs.append({"k": "alloc", "sid": sid, "ev": e0 + 6, "bytes": late_mm,
                           "dev": "cpu", "op": "mm.default", "mod": f"blocks.{i}",
                           "ph": "forward", "step": 1})
            frees.append({"k": "free", "sid": sid, "ev": e0 + 7, "last": e0 + 6})
            sid += 1
        allocs.append({"k": "alloc", "sid": sid, "ev": e1 - 1, "bytes": Y, "dev": "cpu",
                       "op": "add.Tensor", "mod": f"blocks.{i}", "ph": "forward", "step": 1})
        if relu_end:    # its own ReLU saves it after it ran: a record at the ReLU
            recs += [{"k": "saved", "sid": sid, "ev": e1 - 1, "mod": f"blocks.{i}"},
                     {"k": "unpack", "sid": sid, "ev": u - 1}]
        if i < L - 1:   # saved by the next block's first op; unpacked in its backward
            un = B + 10 * (L - 2 - i) + 3
            recs += [{"k": "saved", "sid": sid, "ev": e1 - 1, "mod": f"blocks.{i + 1}"},
                     {"k": "unpack", "sid": sid, "ev": un},
                     {"k": "fwdlast", "sid": sid, "last": e1}]
            last = u - 1 if relu_end else un
            frees.append({"k": "free", "sid": sid, "ev": last + 1, "last": last})
        else:           # the last output: read by the loss, not saved
            frees.append({"k": "free", "sid": sid, "ev": B, "last": B - 1})
        sid += 1
        recs.append({"k": "scope", "mod": f"blocks.{i}", "cls": "Block", "ev0": e0, "ev1": e1,
                     "ph": "forward", "step": 1, "ns": 1000})
    recs += allocs + frees
    recs += [{"k": "phase", "ev": B, "ph": "backward", "step": 1},
             {"k": "step", "step": 1, "ev": B + 10 * L, "ns": 10_000},
             {"k": "end", "ev": B + 10 * L + 1, "status": "ok"}]
    return Ledger.from_records(recs), B - 1


@pytest.mark.parametrize("L", [1, 3, 8])
def test_baseline_holds_every_saved_activation(L):
    led, before_bw = chain(L)
    r = replay(Prepared.from_ledger(led), parse_policy("none"), probe=before_bw)
    # every h (H) and every saved output but the last (Y): L*H + (L-1)*Y
    assert r.at_probe["activation"] == L * H + (L - 1) * Y
    assert r.peak_bytes == L * H + L * Y   # the last output (temporary) is live too


@pytest.mark.parametrize("L", [1, 3, 8])
def test_checkpoint_every_block_keeps_only_block_inputs(L):
    led, before_bw = chain(L)
    r = replay(Prepared.from_ledger(led), parse_policy("checkpoint:blocks.*"), rng_bytes=0,
               probe=before_bw)
    # only the block inputs (outputs of blocks 0..L-2) stay saved: (L-1)*Y bytes
    assert r.at_probe["activation"] == (L - 1) * Y
    # one recompute segment per block: events e0 .. e0+2 (the save record is at e0+2: an
    # output save by that op, or an input save by the next op, whose pack comes before it
    # runs; torch's early stop raises from that pack either way, Rule 3): 3 events
    assert r.recompute_events == 3 * L


def test_checkpoint_peak_is_one_block_recomputed():
    L = 4
    led, _ = chain(L)
    r = replay(Prepared.from_ledger(led), parse_policy("checkpoint:blocks.*"), rng_bytes=0)
    # block 3's forward holds h_3 while the (L-1)*Y inputs are held: 1000 + 300 = 1300,
    # and its recomputation before its backward brings the same 1300 back
    assert r.peak_bytes == H + (L - 1) * Y
    assert r.recompute_events == 3 * L   # e0 .. e0+2 per block (Rule 3)


def test_checkpoint_rng_state_is_counted_per_block():
    L = 3
    led, before_bw = chain(L)
    r = replay(Prepared.from_ledger(led), parse_policy("checkpoint:blocks.*"), probe=before_bw)
    assert r.at_probe["other"] == 3 * 5056   # one CPU generator state per checkpointed call


@pytest.mark.parametrize("L", [1, 3, 8])
def test_offload_everything_leaves_no_saved_activation_on_device(L):
    led, before_bw = chain(L)
    r = replay(Prepared.from_ledger(led), parse_policy("offload:blocks.*"), probe=before_bw)
    assert r.at_probe["activation"] == 0
    assert r.offload_bytes == L * H + (L - 1) * Y


def test_offload_min_keeps_small_storages():
    L = 3
    led, before_bw = chain(L)
    r = replay(Prepared.from_ledger(led), parse_policy("offload:blocks.*:min=500B"),
               probe=before_bw)
    assert r.at_probe["activation"] == (L - 1) * Y   # the 100-byte outputs stay
    assert r.offload_bytes == L * H


def test_half_checkpoint_drops_only_selected_blocks():
    L = 4
    led, before_bw = chain(L)
    r = replay(Prepared.from_ledger(led), parse_policy("checkpoint:blocks.[0-1]"), rng_bytes=0,
               probe=before_bw)
    assert r.at_probe["activation"] == 2 * H + (L - 1) * Y


def test_selective_keeps_listed_ops():
    L = 2
    led, before_bw = chain(L)
    keep = replay(Prepared.from_ledger(led), parse_policy("selective:blocks.*:save=mul"),
                  rng_bytes=0, probe=before_bw)
    drop = replay(Prepared.from_ledger(led), parse_policy("selective:blocks.*:save=mm"),
                  rng_bytes=0, probe=before_bw)
    assert keep.at_probe["activation"] == L * H + (L - 1) * Y   # h is made by mul: kept
    assert drop.at_probe["activation"] == (L - 1) * Y


def test_selective_holds_a_cached_output_past_the_early_stop_until_backward():
    """Rule 7: a save-list output made after the region's last save is cached in forward
    and never handed back (the recompute stops first), so the cache holds it until the
    block's backward is done. Each block makes a 7-byte `mm` temporary after its last save;
    before backward both blocks' copies are live under selective, neither without it."""
    L, T = 2, 7
    led, before_bw = chain(L, late_mm=T)
    prep = Prepared.from_ledger(led)
    sel = replay(prep, parse_policy("selective:blocks.*:save=mm"), rng_bytes=0,
                 probe=before_bw)
    ckpt = replay(prep, parse_policy("checkpoint:blocks.*"), rng_bytes=0, probe=before_bw)
    assert sel.at_probe["temporary"] - ckpt.at_probe["temporary"] == L * T
    assert sel.at_probe["activation"] == ckpt.at_probe["activation"] == (L - 1) * Y


@pytest.fixture
def no_calibration(tmp_path, monkeypatch):
    """No cached calibration: the machine's constants are 0 (their own tests are below)."""
    monkeypatch.setenv("MEMLEDGER_CACHE_DIR", str(tmp_path))


def test_recompute_cost_subtracts_tracing_overhead_per_event(no_calibration):
    from memledger.replay.predict import predict

    L = 3
    led, _ = chain(L)
    # the step ends after event B + 10L = 62: 63 events. Traced 10,000 ns, untraced
    # 9,370 ns: tracing added (10,000 - 9,370) / 63 = 10 ns per event.
    rep = predict(led, [parse_policy("checkpoint:blocks.*")], step_time_s=9_370e-9)
    # each call: 1,000 ns traced over 10 events, 3 re-run: 300 ns - 3 x 10 ns = 270 ns;
    # 3 calls: 810 ns
    assert rep.policies[0].recompute_s == pytest.approx(810e-9, rel=1e-9)
    assert rep.policies[0].transfer_s == 0.0
    upper = predict(led, [parse_policy("checkpoint:blocks.*")])   # no untraced time known
    assert upper.policies[0].recompute_s == pytest.approx(900e-9, rel=1e-9)   # 3 x 300 ns


def test_offload_transfer_cost_uses_the_given_bandwidth(no_calibration):
    from memledger.replay.predict import predict

    L = 2
    led, _ = chain(L)
    rep = predict(led, [parse_policy("offload:blocks.*")], bandwidth=1e6)
    # offloaded per step: 2 x 1,000 + 1 x 100 = 2,100 B, written and read: 4,200 B at 1e6 B/s
    assert rep.policies[0].transfer_s == pytest.approx(4_200 / 1e6, rel=1e-9)


@pytest.mark.parametrize("policy", ["checkpoint:blocks.0", "offload:blocks.0"])
def test_output_saved_by_its_block_and_the_next_goes_after_the_next_ones_backward(policy):
    """Block 0 ends in a ReLU saving its output y_0, block 1 starts with an op saving it
    as its input: two saves at one event by two calls (Rule 5). Under a policy on block 0
    alone, block 1's save still holds y_0 through forward; block 0's own save no longer
    does (a placeholder, or a copy on disk), so y_0 goes once block 1's node that read it
    returned, before block 0's backward, which gets it back by re-running (reading back).
    Read as saved by block 0 alone, y_0 was dropped (moved) while block 1's node held it:
    a channels_last CNN's `checkpoint:blocks.0` was predicted 103,296 B under measured,
    `offload:blocks.0` 121,664 B under (tests/clients/train_mech.py --case channels_last);
    kept instead to block 0's backward, 14,336 B over."""
    L = 2
    led, before_bw = chain(L, relu_end=True)
    B = before_bw + 1
    prep = Prepared.from_ledger(led)
    base = replay(prep, parse_policy("none"), probe=before_bw)
    assert base.at_probe["activation"] == 2 * H + 2 * Y
    r = replay(prep, parse_policy(policy), rng_bytes=0, probe=before_bw)
    assert r.at_probe["activation"] == H + 2 * Y     # h_1, y_1 and y_0 (block 1 holds it)
    # between block 1's backward (B .. B+9, y_0 read at B+3) and block 0's (from B+10)
    assert replay(prep, parse_policy("none"), probe=B + 9).at_probe["activation"] == H + Y
    r = replay(prep, parse_policy(policy), rng_bytes=0, probe=B + 9)
    assert r.at_probe["activation"] == 0


def _shared_input_ledger(batch: bool = False, free_at: int = 26, extra: tuple = ()) -> Ledger:
    """E (64 B) is made by `temb` (event 1) and saved as an input by blocks.0 (record at
    3), blocks.1 (7) and `head` (11); each also saves its own h_i (H B). The script lets go
    of E as forward ends (event 14). Backward: head's node unpacks h2 and E at 16-17,
    blocks.1's h1 and E at 20-21, blocks.0's h0 and E at 24-25; E is freed at 26.
    `batch`: E is the batch instead, made in setup (event 0), an `input`. `free_at`: E's
    free; `extra`: more records."""
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
            {"k": "phase", "ev": 1, "ph": "forward", "step": 1},
            {"k": "alloc", "sid": 0, "ev": 0 if batch else 1, "bytes": 64, "dev": "cpu",
             "op": "randn.default" if batch else "addmm.default", "mod": "" if batch
             else "temb", "ph": "setup" if batch else "forward", "step": 1},
            {"k": "scope", "mod": "temb", "cls": "Linear", "ev0": 1, "ev1": 2, "ph": "forward",
             "step": 1, "ns": 1000}]
    if batch:
        recs.append({"k": "role", "sid": 0, "role": "input"})
    for i, (mod, e0) in enumerate((("blocks.0", 2), ("blocks.1", 6), ("head", 10))):
        u = 16 + 4 * (2 - i)
        recs += [{"k": "scope", "mod": mod, "cls": "Block", "ev0": e0, "ev1": e0 + 4,
                  "ph": "forward", "step": 1, "ns": 1000},
                 {"k": "saved", "sid": 0, "ev": e0 + 1, "mod": mod},
                 {"k": "unpack", "sid": 0, "ev": u + 1},
                 {"k": "alloc", "sid": i + 1, "ev": e0 + 1, "bytes": H, "dev": "cpu",
                  "op": "mul.Tensor", "mod": mod, "ph": "forward", "step": 1},
                 {"k": "saved", "sid": i + 1, "ev": e0 + 2, "mod": mod},
                 {"k": "fwdlast", "sid": i + 1, "last": e0 + 2},
                 {"k": "unpack", "sid": i + 1, "ev": u},
                 {"k": "free", "sid": i + 1, "ev": u + 2, "last": u}]
    recs += [{"k": "fwdlast", "sid": 0, "last": 11}, {"k": "released", "sid": 0, "ev": 14},
             {"k": "phase", "ev": 15, "ph": "backward", "step": 1},
             {"k": "free", "sid": 0, "ev": free_at, "last": 25},
             {"k": "step", "step": 1, "ev": 28, "ns": 10_000},
             {"k": "end", "ev": 29, "status": "ok"}, *extra]
    # unpack records in event order, as a trace writes them (a storage's last is its last)
    unpacks = sorted((r for r in recs if r["k"] == "unpack"), key=lambda r: r["ev"])
    return Ledger.from_records([r for r in recs if r["k"] != "unpack"] + unpacks)


@pytest.mark.parametrize("batch", [False, True])
def test_an_input_that_offloaded_calls_save_goes_with_its_last_holder_outside(batch):
    """Offload has no frame: a storage made outside the offloaded calls (a UNet's time
    embedding, handed to every resnet) and saved by them and by a call outside the policy
    is held, under offload, only by the outside call's save. It goes when that node
    returned (head's, at 17), not at its baseline free after blocks.0's backward (26);
    blocks.1's read-back copy comes at 21. diffusers' UNet2DConditionModel with its own
    gradient checkpointing, `offload:down_blocks.*`: 512 B over measured before. So does
    the batch the script let go of (an autoencoder's MSE saves its target, the image the
    encoder's first conv saved: diffusers' AutoencoderKL, `offload:encoder`, 6,144 B over)."""
    prep = Prepared.from_ledger(_shared_input_ledger(batch))
    pol = parse_policy("offload:blocks.*")
    e = 64 if batch else 0

    def live(policy, probe):   # (saved bytes, of which the batch)
        at = replay(prep, policy, rng_bytes=0, probe=probe).at_probe
        return at["activation"] + at["input"], at["input"]

    assert live(parse_policy("none"), 19) == (64 + 2 * H, e)
    assert live(pol, 19) == (0, 0)
    # blocks.1's node read h1 (at 20) and E (at 21) back: one copy of each
    assert live(pol, 21) == (64 + H, e)


def test_a_read_back_copy_the_scripts_own_checkpoint_reruns_on_lives_as_the_original():
    """As above, but each block's save of E is the input its own checkpoint (the
    script's: `blocks.i.inner`, diffusers' checkpointed transformer blocks) keeps. The
    re-run after blocks.0's node unpacked E runs on the read-back copy and saves it again,
    so the copy lives as the original did in the baseline, to its free at 27, not to the
    node's return at 26. diffusers' UNet2DConditionModel with its own checkpointing,
    `offload:down_blocks.*`: the cross-attention states (2, 6, 16) fp32, 768 B under."""
    ckpt = tuple({"k": "script_ckpt", "mod": f"blocks.{i}.inner", "first": f"blocks.{i}.inner",
                  "ev": 2 + 4 * i} for i in range(2))
    prep = Prepared.from_ledger(_shared_input_ledger(free_at=27, extra=ckpt))
    pol = parse_policy("offload:blocks.*")
    assert replay(prep, parse_policy("none"), probe=26).at_probe["activation"] == 64
    assert replay(prep, pol, rng_bytes=0, probe=26).at_probe["activation"] == 64
    assert replay(prep, pol, rng_bytes=0, probe=27).at_probe["activation"] == 0
    # head offloaded instead: blocks.0's save, E's last read, holds the original, and the
    # re-run it starts keeps it to its free as well (768 B under on that UNet before)
    head = parse_policy("offload:head")
    assert replay(prep, head, rng_bytes=0, probe=26).at_probe["activation"] == 64


def test_a_kept_storage_its_own_call_saved_is_held_again_after_the_rerun():
    """blocks.0 makes W (512 B: a weight's autocast cast) and saves it; `head`, called
    after it, takes W from autocast's cache and saves it too (DiT's output layer calls the
    first block's embedding again). W is kept, not dropped; blocks.0's re-run (inserted at
    15, its first unpack) makes W again and packs it for blocks.0's node, which unpacks it
    at 17 and returns at 19: that copy lives to 19, where it went at the re-run's early
    stop before (512 B under measured on DiT under bf16, `checkpoint:transformer_blocks.*`).
    """
    fw = {"ph": "forward", "step": 1}
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "phase", "ev": 0, "ph": "setup", "step": 1},
            {"k": "phase", "ev": 1, "ph": "forward", "step": 1},
            {"k": "scope", "mod": "blocks.0", "cls": "Block", "ev0": 1, "ev1": 6, "ns": 1, **fw},
            {"k": "scope", "mod": "head", "cls": "Head", "ev0": 6, "ev1": 9, "ns": 1, **fw},
            {"k": "alloc", "sid": 0, "ev": 2, "bytes": 512, "dev": "cpu", "op": "_to_copy.default",
             "mod": "blocks.0", **fw},
            {"k": "alloc", "sid": 1, "ev": 3, "bytes": H, "dev": "cpu", "op": "mul.Tensor",
             "mod": "blocks.0", **fw},
            {"k": "alloc", "sid": 2, "ev": 5, "bytes": Y, "dev": "cpu", "op": "add.Tensor",
             "mod": "blocks.0", **fw},
            {"k": "saved", "sid": 0, "ev": 2, "mod": "blocks.0"},
            {"k": "saved", "sid": 1, "ev": 3, "mod": "blocks.0"},
            {"k": "saved", "sid": 2, "ev": 6, "mod": "head"},
            {"k": "saved", "sid": 0, "ev": 7, "mod": "head"},
            {"k": "released", "sid": 0, "ev": 9},
            {"k": "phase", "ev": 10, "ph": "backward", "step": 1},
            {"k": "fwdlast", "sid": 0, "last": 7}, {"k": "fwdlast", "sid": 1, "last": 4},
            {"k": "fwdlast", "sid": 2, "last": 7},
            {"k": "unpack", "sid": 2, "ev": 11},
            {"k": "unpack", "sid": 0, "ev": 12, "end": 13},
            {"k": "free", "sid": 2, "ev": 12, "last": 11},
            {"k": "unpack", "sid": 1, "ev": 15},
            {"k": "free", "sid": 1, "ev": 16, "last": 15},
            {"k": "unpack", "sid": 0, "ev": 17, "end": 19},
            {"k": "free", "sid": 0, "ev": 20, "last": 17},
            {"k": "step", "step": 1, "ev": 21, "ns": 10_000},
            {"k": "end", "ev": 22, "status": "ok"}]
    prep = Prepared.from_ledger(Ledger.from_records(recs))
    pol = parse_policy("checkpoint:blocks.0")
    assert replay(prep, parse_policy("none"), probe=18).at_probe["activation"] == 512
    assert replay(prep, pol, rng_bytes=0, probe=18).at_probe["activation"] == 512
    assert replay(prep, pol, rng_bytes=0, probe=19).at_probe["activation"] == 0


def test_an_unpack_reads_the_save_it_names_past_a_dead_branchs_save():
    """Note [Which save an unpack reads] (replay/prepared.py): a storage saved three times,
    at events 2, 5 and 8; the save at 8 is on a dead branch (backward never reads it). By
    a stack, the unpack at 20 read the save at 8 and the one at 24 the save at 5, leaving
    the save at 2 unread; the unpacks that name their saves (`sev`) read 5 and 2. Two
    saves at one event (an op's output, saved by that op after it ran and by the next op
    before it runs) are read latest first."""
    from memledger.replay.prepared import _packs

    recs = [{"k": "header", "schema": "memledger.ledger/1", "device": "cpu"},
            {"k": "alloc", "sid": 1, "ev": 0, "bytes": 64, "dev": "cpu", "op": "aten.x",
             "mod": "", "ph": "forward", "step": 1},
            {"k": "alloc", "sid": 2, "ev": 10, "bytes": 64, "dev": "cpu", "op": "aten.y",
             "mod": "", "ph": "forward", "step": 1},
            {"k": "saved", "sid": 1, "ev": 2, "mod": "a"},
            {"k": "saved", "sid": 1, "ev": 5, "mod": "b"},
            {"k": "saved", "sid": 1, "ev": 8, "mod": "c"},
            {"k": "saved", "sid": 2, "ev": 11, "mod": "d"},      # by the op after it ran
            {"k": "saved", "sid": 2, "ev": 11, "mod": "e"},      # and the next op's input
            {"k": "unpack", "sid": 2, "ev": 18, "end": 19, "rel": 19, "sev": 11},
            {"k": "unpack", "sid": 2, "ev": 19, "end": 20, "rel": 20, "sev": 11},
            {"k": "unpack", "sid": 1, "ev": 20, "end": 21, "rel": 21, "sev": 5},
            {"k": "unpack", "sid": 1, "ev": 24, "end": 25, "rel": 25, "sev": 2},
            {"k": "end", "ev": 30, "status": "ok", "message": ""}]
    led = Ledger.from_records(recs)
    got = _packs(led, led.storages)
    assert got["pack_unpack"].tolist() == [24, 20, -1, 19, 18]
    assert got["pack_unpack_end"].tolist() == [25, 21, -1, 20, 19]
    # without `sev` (an older ledger), the stack: one save late past the dead one
    old = Ledger.from_records([{k: v for k, v in r.items() if k != "sev"} for r in recs])
    assert _packs(old, old.storages)["pack_unpack"].tolist() == [-1, 24, 20, 19, 18]
