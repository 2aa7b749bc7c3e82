"""`--nproc 2`: FSDP2, DDP and ZeRO examples traced on two CPU ranks (gloo) through torchrun.

One 2-rank trace per example, shared by every test here (each costs two torchrun launches).
The model of examples/_dist_common.py with its defaults except `--vocab-size 255` for FSDP
(to show the padding): n_layer 2, n_embd C=64, T=32, fp32.

    parameters (floats): wte V×C + wpe 32×64 = 2,048 + 2 blocks × 49,984 + ln_f 128
        V=256: 16,384 + 2,048 + 99,968 + 128 = 118,528 floats = 474,112 B
        V=255: 16,320 + 2,048 + 99,968 + 128 = 118,464 floats = 473,856 B
    block: ln_1 128 + c_attn 64×192+192 = 12,480 + c_proj 4,160 + ln_2 128
           + c_fc 64×256+256 = 16,640 + c_proj 256×64+64 = 16,448  = 49,984 floats
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
from pathlib import Path

import pytest

from memledger.cli import main
from memledger.ledger.model import Ledger

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCRIPTS = Path(__file__).parent / "scripts"

MODEL_BYTES = 118_528 * 4                     # 474,112 B, V=256
ADAMW_STATE = 2 * MODEL_BYTES + 28 * 4        # exp_avg + exp_avg_sq + a 4 B step per tensor (28)
FSDP_ARGS = ["--vocab-size", "255"]


@pytest.fixture(scope="session")
def rank_ledgers(tmp_path_factory):
    """{example: (run.ledger, [rank 0 Ledger, rank 1 Ledger])}: 1 step traced; FSDP and ZeRO
    measured too (ZeRO runs under DDP, so its peak check covers DDP's buckets as well)."""
    # One trace for the whole session even under pytest-xdist: the first worker traces into a
    # directory every worker shares, the others wait on the lock and read the same ledgers.
    base = tmp_path_factory.getbasetemp()   # under xdist: this session's popen-gwN
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "ranks-ledgers"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "done").exists():
            _trace_examples(shared)
            (shared / "done").write_text("ok")
    return {name: (shared / f"{name}.ledger",
                   [Ledger.load(shared / f"{name}.rank{r}.ledger") for r in (0, 1)])
            for name in ("fsdp", "ddp", "zero")}


def _trace_examples(out: Path) -> None:
    for name, extra, measure in (("fsdp", FSDP_ARGS, "--measure"), ("ddp", [], "--no-measure"),
                                 ("zero", [], "--measure")):
        path = out / f"{name}.ledger"
        code = main(["trace", "--nproc", "2", "--steps", "1", measure,
                     str(EXAMPLES / f"train_{name}.py"), "-o", str(path), "--", "--steps", "2",
                     *extra])
        assert code == 0, name


def _sum(led: Ledger, **where) -> int:
    st = led.storages
    for col, val in where.items():
        st = st[st[col] == val]
    return int(st["bytes"].sum())


def test_every_rank_has_its_own_ledger_with_rank_in_the_header(rank_ledgers):
    from memledger.commands.common import kept_summary

    for path, leds in rank_ledgers.values():
        assert [(led.header["rank"], led.header["world_size"]) for led in leds] == [(0, 2), (1, 2)]
        assert all(led.complete and led.steps_traced == 1 for led in leds)
        # each rank keeps the summary `trace` printed (Note [The summary kept in the ledger])
        for r, led in enumerate(leds):
            assert kept_summary(path.with_name(f"{path.stem}.rank{r}.ledger")) == led.summary()


def test_fsdp_parameters_are_exactly_the_local_shards(rank_ledgers):
    # V=255: wte (255, 64) pads to 256 rows, 128 per rank; every other dim 0 is even.
    # per rank: (118,464 + 64 padding) / 2 = 59,264 floats = 237,056 B
    for led in rank_ledgers["fsdp"][1]:
        assert _sum(led, category="parameter", shard="sharded") == 237_056
        s = led.summary()
        assert s.parameter_shards["sharded"] == 237_056
        # gathered for compute, freed after: named, and at most the model's unsharded size
        unsharded = led.storages[led.storages["shard"] == "unsharded"]
        assert {"blocks.0.attn.c_attn.weight", "blocks.1.mlp.c_fc.weight"} <= set(unsharded["name"])
        assert 0 < s.parameter_shards.get("unsharded", 0) <= 473_856


def test_fsdp_full_weights_cut_into_shards_are_parameters(rank_ledgers):
    """Note [Sharded storages], 5: the full weights the script built, which `fully_shard`
    cuts each rank's shard from and lets go, are `parameter` (shard `unsharded`) under
    their names, not `other`: once per rank, the full parameter bytes, unpadded."""
    for led in rank_ledgers["fsdp"][1]:
        st = led.storages
        full = st[(st["category"] == "parameter") & (st["phase"] == "setup")
                  & (st["shard"] == "unsharded")]
        # V=255: 118,464 floats = 473,856 B (the shards pad wte to 256 rows; this does not)
        assert int(full["bytes"].sum()) == 118_464 * 4
        by_name = full.set_index("name")["bytes"]
        assert by_name["wte.weight"] == 255 * 64 * 4            # 65,280 B
        assert by_name["blocks.0.mlp.c_fc.weight"] == 256 * 64 * 4
        assert len(by_name) == 28 and by_name.index.is_unique
        # freed in setup, once fully_shard returned: not the peak's
        assert (full["freed"] < st.loc[st["phase"] == "forward", "created"].min()).all()


def test_fsdp_gathers_and_reduce_scatters_are_communication_per_unit(rank_ledgers):
    led = rank_ledgers["fsdp"][1][0]
    comm = led.storages[led.storages["category"] == "communication"]
    # one block's flat all-gather / reduce-scatter buffer: 49,984 floats = 199,936 B,
    # attributed to the FSDP unit it serves (Note [Sharded storages], 4.)
    blocks = comm[comm["bytes"] == 199_936]
    assert set(blocks["module"]) == {"blocks.0", "blocks.1"}
    assert (blocks["phase"] == "backward").any() and (blocks["phase"] == "forward").any()
    # the reduce-scatter's output is the sharded gradient: 2 blocks + root, per rank ½
    assert _sum(led, category="gradient") == 237_056


def test_ddp_holds_the_whole_model_and_its_bucket_is_communication(rank_ledgers):
    for led in rank_ledgers["ddp"][1]:
        assert _sum(led, category="parameter") == MODEL_BYTES
        assert set(led.storages.loc[led.storages["category"] == "parameter", "shard"]) == {""}
        assert _sum(led, category="gradient") == MODEL_BYTES
        # one bucket (the model is under DDP's first-bucket cap of 1 MiB): 474,112 B
        comm = led.storages[led.storages["category"] == "communication"]
        assert MODEL_BYTES in set(comm["bytes"])
        assert not ((led.storages["category"] == "temporary")
                    & (led.storages["bytes"] == MODEL_BYTES)).any()


def test_zero_shards_the_optimizer_state(rank_ledgers):
    state = [led.resident_at_end()["optimizer_state"] for led in rank_ledgers["zero"][1]]
    # AdamW state of all 28 tensors: 2 × 474,112 + 28 × 4 = 948,336 B, split by ZeRO's
    # greedy partition (by size) into two near-halves
    assert sum(state) == ADAMW_STATE
    assert all(0.45 * ADAMW_STATE < s < 0.55 * ADAMW_STATE for s in state)
    for led in rank_ledgers["zero"][1]:   # parameters and gradients stay whole (DDP)
        assert _sum(led, category="parameter") == MODEL_BYTES


def _freed_communication(led: Ledger) -> list[int]:
    """Bytes of each communication storage the ledger saw freed before its own peak."""
    st = led.storages
    done = st[(st["category"] == "communication") & (st["freed"] <= led.peak().event)]
    return sorted(int(b) for b in done["bytes"])


def _subset_sums(sizes: list[int]) -> set[int]:
    sums = {0}
    for b in sizes:
        sums |= {s + b for s in sums}
    return sums


@pytest.mark.parametrize("name", ["fsdp", "zero"])
def test_each_rank_ledger_peak_matches_its_allocator_peak(rank_ledgers, name):
    # Within 0.5 %, except for two gaps, both gloo's and both named:
    # 1. The collectives' own buffers live at the allocator's peak (allocated inside c10d
    #    ops, which the dispatcher never sees: Note [Collective scratch]). How much of them
    #    overlaps the peak depends on when gloo's async work finishes: 0 to those bytes.
    # 2. Frees the profiler never reports: gloo's worker thread drops a finished work's last
    #    reference to the tensors it sent, and no free made on that thread reaches the
    #    profiler (allocator.py `pointer_peak`). The ledger sees those frees (communication
    #    storages freed before its peak); the allocator's count keeps such a buffer until
    #    its addresses are handed out again, so any subset of them may be counted.
    for led in rank_ledgers[name][1]:
        m = led.measured
        gap = m["peak_bytes"] - led.peak().bytes
        tol = 0.005 * m["peak_bytes"]
        freed = _freed_communication(led)
        if name == "zero":
            # DDP's broadcasts before the peak: the module states at construction, 474,112 B
            # of parameters + 2 blocks × 32×32 × 4 B causal masks = 482,304 B, and the masks
            # again in the forward, 8,192 B: the gap beyond 0.5 % is 0, 8,192, 482,304 or
            # 490,496 B. Seen in 64 rank runs (2 CPU cores busy beside them): 8,192 on 9;
            # the 482,304 B free went unseen on 6 of 16 and its address was handed out again
            # before the peak each time; a CI failure of |gap| <= 0.5 % (13,186 B) could
            # only have been that buffer kept (docs/distributed.md)
            # (8,192 is in the list when gloo's thread freed it before the ledger's peak, as
            # it did in every run seen; 8 and 608 B: DDP's and ZeRO's setup gathers)
            assert 482_304 in freed and set(freed) <= {8, 608, 8_192, 482_304}, freed
        # 3. FSDP2 only: the two passes are two runs, and gloo's thread may release a
        #    block's gathered flat buffer (49,984 floats x 4 = 199,936 B) late in the ledger
        #    pass and on time in the allocator pass: the ledger then reads one or two such
        #    buffers above the allocator (seen once at load 3: gap -196,848 B)
        late = [0, 199_936, 2 * 199_936] if name == "fsdp" else [0]
        assert any(-tol <= gap + k - s <= m.get("collective_at_peak_bytes", 0) + tol
                   for s in _subset_sums(freed) for k in late), (name, m, gap, freed)


def test_show_finds_every_rank_and_names_the_worst(rank_ledgers, capsys):
    path, leds = rank_ledgers["fsdp"]
    assert main(["show", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    worst = d["worst_rank"]
    assert d["peak"] == d["ranks"][worst]["peak"] and d["schema"] == "memledger.summary/1"
    peaks = [max(r["measured"]["peak_bytes"], r["peak"]["bytes"]) for r in d["ranks"]]
    assert d["rank_skew"]["spread_bytes"] == max(peaks) - min(peaks)
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 ranks" in out and "◀" in out and "rank skew" in out


def test_check_limits_every_rank(rank_ledgers, capsys):
    path, leds = rank_ledgers["zero"]
    assert main(["check", str(path), "--budget", "100MiB", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is True and len(d["ranks"]) == 2 and d["schema"] == "memledger.check/1"
    assert main(["check", str(path), "--budget", "1MiB"]) == 1
    assert "over budget on ranks 0, 1 of 2" in capsys.readouterr().err


@pytest.mark.parametrize("mode, code, words", [
    ("nopg", 2, ["never initialised a process group"]),
    ("early", 2, ["the script ran no optimizer step"]),   # not "never initialised a group"
    ("crash", 3, ["rank 1 failed", "ValueError: rank 1 broke on purpose"]),
    ("hang", 3, ["rank", "no optimizer step for 4 s"]),
])
def test_bad_runs_end_in_one_line_and_keep_every_ledger(tmp_path, capsys, mode, code, words):
    out = tmp_path / "bad.ledger"
    rc = main(["trace", "--nproc", "2", "--timeout", "4", "--no-measure",
               str(SCRIPTS / "dist_modes.py"), "-o", str(out), "--", mode])
    err = capsys.readouterr().err
    last = [ln for ln in err.splitlines() if ln.startswith("memledger:")][-1]
    assert rc == code and all(w in last for w in words), err
    for r in (0, 1):   # every rank's (partial) ledger is kept and readable
        Ledger.load(tmp_path / f"bad.rank{r}.ledger")


# ---- simulated ranks: --fake --world N (Note [A simulated rank]) -----------------------------

def _fake_rank(tmp_path, world: int, *extra: str, rank: int = 0) -> Ledger:
    out = tmp_path / f"sim{world}.{rank}.ledger"
    assert main(["trace", "--fake", "--world", str(world), "--rank", str(rank), "--steps", "1",
                 str(EXAMPLES / "train_fsdp.py"), "-o", str(out), "--", "--steps", "2",
                 *extra]) == 0
    return Ledger.load(out)


def test_fake_world_2_rank_0_is_the_real_rank_0(rank_ledgers, tmp_path):
    real = rank_ledgers["fsdp"][1][0]
    sim = _fake_rank(tmp_path, 2, *FSDP_ARGS)
    assert (sim.header["rank"], sim.header["world_size"], sim.header["simulated"]) == (0, 2, True)
    # the same categories at each one's peak, within 64 B (the real run's few Python scalars).
    # The simulated rank is deterministic; the real one is not quite: gloo frees a collective's
    # buffer from its own thread, so under load (CI, two xdist workers) one communication
    # buffer can still be live at the real peak or already gone (seen once in two full runs).
    # That buffer, and what the peak's position moves with it, is the only slack allowed.
    st = real.storages
    async_slack = int(st[st["category"] == "communication"]["bytes"].max())   # 199,936 B here
    real_at, sim_at = real.by_category(real.peak().event), sim.by_category(sim.peak().event)
    exact = [c for c in real_at if c not in ("communication", "temporary")]
    assert all(abs(real_at[c] - sim_at[c]) <= 64 for c in exact), (real_at, sim_at)
    assert all(abs(real_at[c] - sim_at[c]) <= 64 + async_slack
               for c in ("communication", "temporary")), (real_at, sim_at)
    assert abs(real.peak().bytes - sim.peak().bytes) <= 64 + async_slack, (real_at, sim_at)
    assert _sum(sim, category="parameter", shard="sharded") == 237_056
    # the full weights the shards were cut from (Note [Sharded storages], 5), as the real's
    assert _sum(sim, category="parameter", shard="unsharded", phase="setup") == 118_464 * 4


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_fake_world_64_keeps_one_64th_plus_padding(tmp_path):
    sim = _fake_rank(tmp_path, 64, *FSDP_ARGS)
    # each parameter's dim 0 is split in 64 rows-chunks, ceil(dim0 / 64) rows per rank:
    #   wte (255, 64) -> 4 × 64 = 256; wpe (32, 64) -> 64; ln_f weight, bias -> 1 + 1
    #   per block: ln_1 1 + 1, c_attn 3 × 64 + 3, attn c_proj 64 + 1, ln_2 1 + 1,
    #              c_fc 4 × 64 + 4, mlp c_proj 1 × 256 + 1  = 781
    #   256 + 64 + 2 + 2 × 781 = 1,884 floats = 7,536 B (the model / 64 is 7,404 B)
    assert _sum(sim, category="parameter", shard="sharded") == 7_536
    assert sim.summary().world_size == 64
    # every rank builds the whole model before sharding: 118,464 floats, named parameters
    assert _sum(sim, category="parameter", shard="unsharded", phase="setup") == 118_464 * 4
    # the last rank holds padding only for most parameters: FSDP2's lazy init makes those
    # shards again after the first forward pre-hook named them; they are still parameters
    # (they read 7,280 B, the rest `temporary`, before the roles were written at each step)
    last = _fake_rank(tmp_path, 64, *FSDP_ARGS, rank=63)
    assert last.resident_at_end()["parameter"] == 7_536


def test_fake_world_refuses_ddp_and_says_how_to_model_it(tmp_path, capsys):
    rc = main(["trace", "--fake", "--world", "8", "--steps", "1",
               str(EXAMPLES / "train_ddp.py"), "-o", str(tmp_path / "d.ledger"), "--",
               "--steps", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "memledger trace --nproc 2" in err and "DistributedDataParallel" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_report_writes_an_index_and_a_page_per_rank(rank_ledgers, tmp_path):
    path, _ = rank_ledgers["fsdp"]
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    index = (tmp_path / "r.html").read_text()
    assert "2 ranks" in index and 'href="r.rank0.html"' in index and "worst" in index
    assert (tmp_path / "r.rank1.html").exists()


def test_diff_pairs_rank_with_rank(rank_ledgers, capsys):
    (zero, zl), (fsdp, fl) = rank_ledgers["zero"], rank_ledgers["fsdp"]
    assert main(["diff", str(zero), str(fsdp), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    deltas = [r["peak"]["delta"] for r in d["ranks"]]
    assert deltas == [f.peak().bytes - z.peak().bytes for z, f in zip(zl, fl)]
    assert d["peak"] == d["ranks"][d["worst_rank"]]["peak"]


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_the_python_api_under_torchrun_writes_one_ledger_per_rank(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "api.ledger"
    # torch's launcher, the user's own: its per-job log folder in tmp_path (it makes a
    # torchelastic_* folder in the system's temp dir without one, left there)
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--log-dir", str(tmp_path / "logs"),
                    "--nproc-per-node", "2", str(SCRIPTS / "dist_modes.py"), "api", str(out)],
                   check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    for r in (0, 1):
        led = Ledger.load(tmp_path / f"api.rank{r}.ledger")
        # Linear(8, 8): 64 + 8 floats = 288 B of parameters on every rank
        assert (led.header["rank"], led.header["world_size"]) == (r, 2)
        assert _sum(led, category="parameter") == 288 and led.steps_traced == 3


def test_measure_gives_every_rank_its_own_result(capsys):
    rc = main(["measure", "--nproc", "2", "--steps", "1", "--time-steps", "1", "--json",
               str(SCRIPTS / "dist_modes.py"), "--", "ok"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["schema"] == "memledger.measure/1"
    assert [r["rank"] for r in d["ranks"]] == [0, 1] and d["peak_bytes"] == max(
        r["peak_bytes"] for r in d["ranks"])


def test_predict_answers_per_rank_and_plan_names_the_rank_it_takes(rank_ledgers, capsys):
    from memledger.ledger.ranks import worst_rank
    from memledger.replay.policies import Policy
    from memledger.replay.predict import predict

    path, leds = rank_ledgers["fsdp"]
    assert main(["predict", str(path), "-p", "checkpoint:blocks.*", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "memledger.predict/1" and [r["rank"] for r in d["ranks"]] == [0, 1]
    own = [predict(led, [Policy.parse("checkpoint:blocks.*")]) for led in leds]  # rank r's own
    assert [r["policies"][0]["peak_bytes"] for r in d["ranks"]] == \
        [p.policies[0].peak_bytes for p in own]
    assert d["policies"] == d["ranks"][d["worst_rank"]]["policies"]
    # plan takes one rank's ledger, the worst rank's, and says so in one line
    assert main(["plan", str(path), "--budget", "100MiB"]) == 0
    w = worst_rank([led.summary() for led in leds])
    note = [ln for ln in capsys.readouterr().err.splitlines() if "rank ledgers" in ln]
    assert len(note) == 1 and f"plan takes one rank's: rank {w}'s" in note[0], note


@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_compare_gates_and_measures_every_rank(rank_ledgers, monkeypatch, capsys):
    # FSDP2 on 2 ranks, one policy, 1 step compared and 1 timed: 3 capture launches and 3
    # measured launches, each 2 ranks (~7 s CPU a launch, whatever the model's size). The
    # baseline compare traces is the fixture's FSDP trace, the same command to the flag, so
    # it is handed over instead of traced again (2 launches fewer). The doctor on ranks:
    # tests/unit/test_compare_ranks.py.
    import memledger.verify.compare_ranks as compare_ranks
    from memledger.trace.launch import RanksResult

    def traced_already(script, argv, out, nproc, steps, measure, timeout_s):
        assert (Path(script).name, argv, nproc, steps, measure) == (
            "train_fsdp.py", ["--steps", "2", *FSDP_ARGS], 2, 1, True)
        path, leds = rank_ledgers["fsdp"]
        return RanksResult([path.with_name(f"fsdp.rank{r}.ledger") for r in (0, 1)], 1, True)

    monkeypatch.setattr(compare_ranks, "trace_ranks", traced_already)
    rc = main(["compare", "--nproc", "2", "--no-doctor", "--steps", "1", "--time-steps", "1",
               "--json",
               "-p", "checkpoint:blocks.*", str(EXAMPLES / "train_fsdp.py"), "--",
               "--steps", "2", *FSDP_ARGS])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["schema"] == "memledger.compare/1" and d["performance"] is True
    assert [r["rank"] for r in d["ranks"]] == [0, 1]
    base = [r["baseline"]["measured_peak_bytes"] for r in d["ranks"]]
    assert d["worst_rank"] == (1 if base[1] > base[0] else 0)
    per_rank = [r["policies"][0] for r in d["ranks"]]
    # each rank compares its own gradient shards with its own baseline's: bitwise equal
    for p in per_rank:
        assert p["gates"] == {"inputs": True, "gradients": True, "update": True}, p
        assert (p["worst_gradient"]["max_abs"], p["steps_compared"]) == (0.0, 1)
        assert p["predicted_peak_bytes"] > 0 and p["measured_peak_bytes"] > 0
    row = d["policies"][0]   # the job's: the rank with the highest measured peak
    assert row["measured_peak_bytes"] == max(p["measured_peak_bytes"] for p in per_rank)
    assert row["saving_bytes"] == max(base) - row["measured_peak_bytes"]
    assert [(x["rank"], x["gradients"], x["measured_peak_bytes"], x["predicted_peak_bytes"])
            for x in row["by_rank"]] == [(r, True, p["measured_peak_bytes"],
                                          p["predicted_peak_bytes"])
                                         for r, p in enumerate(per_rank)]
    assert row["verdict"] in ("ADOPT", "OK") and {p["verdict"] for p in per_rank} == {row["verdict"]}
    # the prediction is the measured peak within 0.5 % (Note [Replay of a checkpointed
    # region], rule 6: FSDP2 gathers nothing again in a recompute; before it, rank 0 read
    # 1,958,992 B against 1,747,848 B measured), give or take the collectives' buffers that
    # gloo's thread released late in one of the two runs and on time in the other: a unit's
    # flat all-gather buffer (a block's 49,984 floats = 199,936 B, the root's 74,240 B) or
    # a rank's reduce-scatter shard of one (half of it), up to three of them either way
    # (with prefetch two blocks' buffers can be live at once). Seen: 1,948,032 / 1,748,104
    # (+one block's), 1,747,856 / 1,947,784 (-one), 1,885,632 / 1,762,712 (+block -root),
    # 1,849,488 / 1,747,848 (+a block's shard), 1,885,072 / 1,747,848 (+a block's shard +the
    # root's shard).
    for r, p in enumerate(per_rank):
        over = p["predicted_peak_bytes"] - p["measured_peak_bytes"]
        tol = 0.005 * p["measured_peak_bytes"]
        st = rank_ledgers["fsdp"][1][r].storages
        flat = sorted(set(st.loc[st["category"] == "communication", "bytes"]))  # 74,240; 199,936
        assert flat == [74_240, 199_936], flat
        late = [*flat, *(b // 2 for b in flat)]
        assert any(abs(over - sum(c * b for c, b in zip(cs, late))) <= tol
                   for cs in itertools.product(range(-2, 3), repeat=len(late))
                   if sum(map(abs, cs)) <= 3), (p["predicted_peak_bytes"],
                                                 p["measured_peak_bytes"])


def test_fsdp_accumulated_gradients_are_gradients(tmp_path):
    """FSDP2 accumulating without gradient sync (`set_requires_gradient_sync(False)`) keeps
    the micro-batch's gradients on the unsharded parameters it gathered; they were counted
    as `temporary` (gradient 0 B at a step-2 peak in backward)."""
    path = tmp_path / "acc.ledger"
    code = main(["trace", "--nproc", "2", "--steps", "2", "--no-measure",
                 str(EXAMPLES / "train_fsdp.py"), "-o", str(path), "--", "--steps", "3",
                 "--accum", "2", *FSDP_ARGS])
    assert code == 0
    led = Ledger.load(tmp_path / "acc.rank0.ledger")
    # the first micro-batch's unsharded gradients, held through the second's backward:
    # 473,856 B at a step-2 backward peak here, where it read 0 (all of it temporary); not
    # asserted to the byte, as gloo's own buffers can move a rank's peak
    assert led.at_peak()["gradient"] > 0


def test_fake_world_refuses_a_script_that_is_not_distributed(tmp_path, capsys):
    """A script that never joins a process group is one process at any world size: a ledger
    headed 'rank 0 of 2' would say otherwise (exit 0 before)."""
    rc = main(["trace", "--fake", "--world", "2", "--steps", "1",
               str(EXAMPLES / "train_mlp.py"), "-o", str(tmp_path / "w.ledger")])
    assert rc == 2 and "never called init_process_group" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--nproc", "0"], ["--fake", "--world", "0"],
                                  ["--fake", "--world", "1025"]])
def test_rank_counts_out_of_range_are_usage_errors(tmp_path, argv):
    """0 once meant 'off' (--nproc 0 ran the script without torchrun: exit 3) and --world
    above 1024 failed in the worker with a traceback: both are refused as flags (exit 2)."""
    assert main(["trace", *argv, str(EXAMPLES / "train_mlp.py"),
                 "-o", str(tmp_path / "w.ledger")]) == 2


def test_an_allocator_pass_broken_by_a_system_error_runs_once_more_on_every_rank(
        tmp_path, capsys):
    # GIVEN a script whose allocator pass fails on every rank with the SystemError the CUDA
    # allocator's history gives a checkpoint's re-run (Note [The allocator's history and a
    # checkpoint's re-run]), the first time only
    out = tmp_path / "h.ledger"
    rc = main(["trace", "--nproc", "2", "--steps", "1", str(SCRIPTS / "dist_modes.py"),
               "-o", str(out), "--", "history", str(tmp_path)])
    err = capsys.readouterr().err
    # THEN trace says so in one line and launches the pass once more, without the history:
    # every rank's ledger keeps its measured peak
    assert rc == 0, err
    assert err.count("measuring again without it") == 1 and "Traceback" not in err, err
    assert all((tmp_path / f"raised.{r}").exists() for r in (0, 1))
    for r in (0, 1):
        led = Ledger.load(tmp_path / f"h.rank{r}.ledger")
        assert led.measured["peak_bytes"] > 0


def test_fake_world_knows_what_a_collective_wrote_in_a_symmetric_world(tmp_path, capfd):
    """Note [What a collective writes] (trace/fake.py, Rule 28): c10d's collectives declare
    no writes, so a simulated rank kept what it knew of their outputs. Gathered token counts
    (soft-moe-pytorch's `gather_sizes`) read as the uninitialised memory of their
    `empty_like` buffers (a different branch per run, no stand-in said), and an all-reduced
    literal as this rank's own count (2, where the real 2-rank sum is 4). Then both were
    unknown: a stand-in 0 at the line that reads them. Now (Note [A symmetric world],
    trace/fake_collectives.py) each holds what it would if every rank held this rank's
    values, the real 2-rank run's `counts [3, 3] batch 4`, and each collective that
    spread them is a stand-in at its own line."""
    from memledger.ledger.fake_info import fake_info

    out = tmp_path / "g.ledger"
    assert main(["trace", "--fake", "--world", "2", "--steps", "1",
                 str(SCRIPTS / "gathered_counts.py"), "-o", str(out)]) == 0
    assert "counts [3, 3] batch 4" in capfd.readouterr().out
    standins = fake_info(Ledger.load(out)).standins
    assumed = "this rank's values on every rank (a symmetric world)"
    assert [(s.op, s.value, s.line) for s in standins] == [
        ("c10d.allgather_.default", assumed, 13),
        ("c10d.allreduce_.default", assumed, 15)], standins


def test_fake_world_answers_is_initialized_as_the_real_rank(tmp_path, capsys):
    """Note [Asked whether the group exists] (trace/fake_world.py): `is_initialized()` was
    True from the start under `--world` (the fake group is made before the script), so a
    library that asks when it is built (soft-moe-pytorch's `Experts`) took its distributed
    path in a script that never joins a group, which a real torchrun runs as single
    processes (exit 0, ranks simulated that do not exist). Now it is False until the script
    joins: this script is refused as not distributed, exit 2; the same script that calls
    `init_process_group` when told False joins, and is rank 0 of 2 from then on."""
    script = tmp_path / "asks.py"
    script.write_text(
        "import sys\nimport torch\nimport torch.distributed as dist\n"
        "asked = dist.is_initialized()\n"
        "if not asked and sys.argv[1:] == ['join']:\n"
        "    dist.init_process_group('gloo')\n"
        "assert dist.is_initialized() == (sys.argv[1:] == ['join'])\n"
        "w = torch.nn.Linear(4, 4)\nopt = torch.optim.SGD(w.parameters(), lr=0.1)\n"
        "for _ in range(2):\n"
        "    opt.zero_grad()\n    w(torch.randn(2, 4)).sum().backward()\n    opt.step()\n")
    rc = main(["trace", "--fake", "--world", "2", "--steps", "1", str(script), "-o",
               str(tmp_path / "a.ledger")])
    assert rc == 2 and "never called init_process_group" in capsys.readouterr().err
    rc = main(["trace", "--fake", "--world", "2", "--steps", "1", str(script), "-o",
               str(tmp_path / "j.ledger"), "--", "join"])
    assert rc == 0, capsys.readouterr().err
    assert Ledger.load(tmp_path / "j.ledger").header["world_size"] == 2
