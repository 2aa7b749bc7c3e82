"""A cache a module fills when it finds it empty, emptied by the loop before every forward
(tests/clients/train_emptied_cache.py; Note [A cache emptied before every call] in
memledger/replay/emptied_cache.py). Before: with a learned slope (the bias has a graph)
predict priced `checkpoint:blocks.*` (43,296 B) and `selective:blocks.*` (48,928 B) that
measure refused (torch's checkpoint: "A different number of tensors was saved"; its
selective checkpoint met `aten.alias` its forward did not run); without the slope predict
priced `selective:blocks.*` (48,640 B), which measure refused, and `checkpoint:blocks.*`
43,008 B against 42,752 B measured (the re-run slices the cache and makes no bias)."""

from tests.clients.harness import run_client

P = ("checkpoint:blocks.*", "selective:blocks.*", "offload:blocks.*")
LINE = "would re-run blocks.1, whose forward call filled an empty buffer of blocks.1.pos"


def test_a_learned_cache_emptied_before_every_call_is_refused_by_both():
    run = run_client("train_emptied_cache.py", ["--case", "learned"], list(P))
    assert run.ledger_peak == run.allocator_peak == 33_824
    for policy in P[:2]:
        p = run.policies[policy]
        assert p.predicted is None and p.measured is None
        assert LINE in p.predict_refusal
    ck = run.policies[P[0]]   # torch's checkpoint refused it: measure says predict's line
    assert ck.predict_refusal == ck.measure_refusal
    assert run.policies[P[2]].predicted == run.policies[P[2]].measured == 31_092


def test_a_cache_without_a_graph_is_not_made_again_by_the_rerun():
    run = run_client("train_emptied_cache.py", ["--case", "fixed"], list(P[:2]))
    assert run.ledger_peak == run.allocator_peak == 33_408
    assert run.policies[P[0]].predicted == run.policies[P[0]].measured == 42_752
    p = run.policies[P[1]]   # Note [A fill a selective re-run finds full]: measure said
    # "selective:blocks.* re-ran blocks.1 and met aten.alias.default that its forward did not
    # run (under autocast: ...; or a buffer or attribute the forward made and the re-run
    # found), ..."; both now say the fill, in one line
    assert p.predicted is None and p.measured is None
    assert p.predict_refusal == p.measure_refusal == (
        "memledger: selective:blocks.* would re-run blocks.1, whose forward call filled an "
        "empty buffer of blocks.1.pos, so the re-run would find it full, holding what the "
        "forward left, and run other ops than its forward (a cache the module fills when it "
        "finds it empty: tranception's ALiBi bias; or a state later calls carry on: a "
        "spiking neuron's membrane), which torch's selective checkpoint cannot replay; "
        "checkpoint or offload that module instead")
