"""Models drawn at random (tests/clients/train_random.py): whatever their mechanics, the
ledger equals the allocator and every policy's prediction equals its measurement. The
programs below are the smallest the minimiser left of draws that once failed (each names
its mechanism); the seeds are whole draws. benchmarks/random_models.py runs many more."""

from __future__ import annotations

import pytest

from tests.clients.harness import ledger_pass, predicted_peak, run_client

pytestmark = pytest.mark.clients

POLICIES = ["checkpoint:blocks.*", "selective:blocks.*", "offload:blocks.*",
            "checkpoint:blocks.0+offload:blocks.[1-2]"]


def _exact(argv: list[str], policies: list[str] = POLICIES, refused: tuple[str, ...] = (),
           scratch: bool = False):
    """Every policy predicted = measured; those in `refused` refused by both sides. The
    ledger's peak equals the allocator's, with the kernel scratch at it where `scratch`."""
    run = run_client("train_random.py", ["--steps", "3", *argv], policies)
    led_peak = run.ledger.peak_with_scratch() if scratch else run.ledger_peak
    assert led_peak == run.allocator_peak
    for text, p in run.policies.items():
        if text in refused:
            assert p.predicted is None and p.measured is None, (text, p)
            assert p.predict_refusal and p.measure_refusal, (text, p)
        else:
            assert p.predicted is not None and p.predicted == p.measured, (text, p)
    return run


def test_a_linear_on_a_transposed_input():
    """`nn.Linear` of a non-contiguous input adds its bias in place untraced, out of place
    under a mode (Note [A Linear's bias, added in place but for the mode]): folded in the
    ledger, `offload:blocks.*` was 195,284 B over measured; unfolded where selective's
    own mode runs, `selective:blocks.*` 202,988 B under."""
    run = _exact(["--program", "none/;none/transpose attention;none/gelu chunk_cat"])
    # one fold per traced step (2): the attention's qkv Linear, its input the `mm` output
    folds = run.ledger.extra["inplace"]
    assert [r["op"] for r in folds] == ["add_"] * 2
    mm = run.ledger.storages.set_index("sid").loc[[r["in"] for r in folds]]
    assert (mm["op"] == "mm.default").all() and (mm["bytes"] == 64 * 16 * 96 * 4).all()


def test_a_block_output_its_caller_keeps():
    """The model keeps the second block's output for the step (`residual_keep` before the
    third): a line outside the region, which no re-run runs again. Read as kept by the
    region, `checkpoint:blocks.*` held the re-made copy and the block's input to the next
    forward, 131,072 B over measured (Rule 10, `_restashed`)."""
    _exact(["--program", "none/attention;none/relu_;residual_keep/"],
           ["checkpoint:blocks.*", "checkpoint:blocks.1"])


@pytest.mark.parametrize("menu,seed", [("basic", 0), ("basic", 7), ("wide", 1)])
def test_whole_draws(menu, seed):
    """Whole draws; the wide one holds BatchNorm's statistics, RMSNorm, in-place dropout, a
    gather and a SwiGLU MLP, and writes in place into a save-list op's output (its ReLU
    in place on a Linear's), for which both sides refuse `selective` alike."""
    _exact(["--seed", str(seed), "--menu", menu],
           refused=("selective:blocks.*",) if menu == "wide" else ())


@pytest.mark.parametrize("program", ["none/dead_save;none/twice;none/",
                                     "none/dropout dead_save;none/twice;none/"])
def test_a_region_whose_save_dies_at_once(program):
    """Block 0's `h.sin()`, dropped, saves `h` and dies at once (Note [A save autograd let
    go of unread]). With nothing else saved, block 0's frame (its RNG state, 5,056 B) was
    held to block 1's backward; after dropout, the dead save made block 0 the first saver
    of its own output, so checkpoint dropped it and block 1's backward started block 0's
    re-run early (`_without_unread_saves`): 5,056 B over measured either way."""
    run = _exact(["--program", program], ["checkpoint:blocks.*", "checkpoint:blocks.0",
                                          "offload:blocks.*"])
    assert len(run.ledger.extra["unread"]) == 2   # one a traced step


def test_a_block_that_returns_its_input_between_two():
    """Block 1 runs no op (it returns its input): its empty call stood between block 0,
    whose last op (sigmoid) saves its own output, and block 2, so that save was read as
    no call's and `offload:blocks.*` kept the output on the device, 131,072 B over
    measured (`record_call`, replay/calls.py)."""
    _exact(["--program", "none/sigmoid;none/;none/tanh"])


def test_two_saves_at_one_event_one_of_them_dead():
    """Block 0's sigmoid saves its own output, and `h.abs()` outside every region saves it
    as its input, both recorded at the sigmoid's event (Rule 5); the `abs` node dies at
    once. Paired by order, the `unread` record marked the sigmoid's save dead and the
    offload kept the output: 131,072 B over measured; the records say which died (`nth`)."""
    run = _exact(["--program", "none/sigmoid;dead_save/;none/tanh"])
    assert {r["nth"] for r in run.ledger.extra["unread"]} == {1}
    # and the one unpack of the two reads the sigmoid's save, not the dead one (paired as
    # the later save, `checkpoint:blocks.0+offload:blocks.[1-2]` was 131,072 B over)
    _exact(["--program", "none/sigmoid;dead_save/rmsnorm;none/"],
           ["checkpoint:blocks.0+offload:blocks.[1-2]", "checkpoint:blocks.*"])


def test_a_number_selective_wraps_again():
    """`softmax(h) * W` saves the wrapped `W`; selective's own dispatch modes, in forward and
    in the re-run, hand the op the number back and torch wraps it again (Note [Numbers
    wrapped again under a dispatch mode]): the re-run's `mul` peak was 8 B under measured."""
    run = _exact(["--program", "none/;none/;none/attention softmax tanh"],
                 ["selective:blocks.*", "checkpoint:blocks.*"])
    wev, wb = run.ledger.rewrapped_numbers()
    assert len(wev) and set(wb.tolist()) == {8}


def test_a_linear_called_twice_bias_summed():
    """Both calls of a block's `branch` Linear send a bias gradient to one input: the
    engine adds them after validate_outputs' sum, after the node's apply returned (Note
    [When an unpacked tensor goes]); the read-back input went with the apply, and
    `offload:blocks.*` was 128 B over measured when it was held through that sum."""
    _exact(["--program", "residual_keep/branch branch;none/;none/"],
           ["offload:blocks.*", "checkpoint:blocks.*"])


def test_blocks_that_run_no_op():
    """Blocks 1 and 2 return their input: calls that ran no op stood between block 0 and
    the save of its last op (its in-place ReLU's output), which fell to no call:
    `checkpoint:blocks.*` dropped nothing and held neither block 0's input nor its RNG
    state, 136,128 B under measured (`record_call`)."""
    _exact(["--program", "none/relu_;none/;none/"], ["checkpoint:blocks.*", "offload:blocks.*"])


def test_a_dead_save_at_the_event_of_a_saving_op():
    """Block 1's ReLU saves its output after it ran and the dropped `h.abs()` after the
    block saves it before it runs: two saves at one event, the second dead. Paired in
    order, the ReLU's save read as the dead one (Note [A save autograd let go of unread],
    `nth`): 132,396 B under measured."""
    run = _exact(["--program", "none/;none/relu;dead_save/"],
                 ["checkpoint:blocks.*", "selective:blocks.*"])
    assert all(r.get("nth") == 1 for r in run.ledger.extra["unread"])


def test_a_dead_save_beside_a_live_one_is_never_unpacked():
    """Block 0 ends in an in-place ReLU, which saves its output at its own event; the
    dropped `h.abs()` saves it there too. The ReLU's unpack was paired to the dead save, so
    block 0's own save read as never unpacked: `checkpoint:blocks.0` started the re-run
    after the ReLU's backward, 126,012 B under measured, and the mixed policy 128 B."""
    _exact(["--program", "none/relu relu_;dead_save/kept branch;none/"],
           ["checkpoint:blocks.0", "checkpoint:blocks.0+offload:blocks.[1-2]"])


def _fake_agrees(argv: list[str], policies: list[str] = POLICIES) -> None:
    """`trace --fake --device cpu` of a draw: its ledger and every policy's prediction
    equal the real run's ledger pass (the allocator's kernel scratch aside: a fake run has
    none; benchmarks/random_models.py --fake)."""
    argv = ["--steps", "3", *argv]
    real = ledger_pass("train_random.py", argv)
    fake = ledger_pass("train_random.py", argv, fake_device="cpu")
    assert fake.peak().bytes == real.peak().bytes
    for text in policies:
        # None on both sides: refused alike
        assert predicted_peak(fake, text) == predicted_peak(real, text), text


def test_fake_a_linear_on_a_transposed_input():
    """The bias fold (Note [A Linear's bias, added in place but for the mode]) found its
    `nn.Linear.forward` frame at a fixed depth, one frame short in a fake run (the fake
    collector's dispatch calls the collector's): the fake ledger was 195,284 B over."""
    _fake_agrees(["--program", "none/;none/transpose attention;none/"])


def test_fake_a_tensor_a_block_keeps_on_itself():
    """`self.kept = h.detach()` in a block's forward (Note [Tensors a call keeps on its
    module]) was looked for as a plain Tensor only: a fake run wrote no `stash` record,
    and `checkpoint:blocks.*` held the region's input to the next step, 26,380 B over."""
    _fake_agrees(["--program", "none/;none/;none/reshape masked kept branch"])


def test_fake_a_number_saved_just_before_a_literal():
    """`h = h * 1.0` (MulBackward0 keeps the wrapped 1.0: 8 B, Note [Wrapped scalars saved
    for backward]) then `h[:, 0] = 0.0`, whose `torch.tensor(0.0)` is lifted: the saved
    number is registered at that lift, and was written as the literal's real source
    (`real:cpu`, counted nowhere): the fake ledger 8 B under."""
    _fake_agrees(["--program", "none/slice_write;none/;none/"])


def test_fake_batchnorm_over_a_sequence():
    """`bn(h.transpose(1, 2)).transpose(1, 2)`: batch norm's kernel makes its output dense,
    the meta kernel kept the transposed strides (Rule 16, Note [Fake runs]), so the next
    Linear's input read as contiguous and its copy (131,072 B, saved) was missing."""
    _fake_agrees(["--program", "none/batchnorm;none/swiglu;none/"])


@pytest.mark.parametrize("program", ["none/relu_inplace;none/;none/",
                                     "none/relu_inplace residual;none/;none/"])
def test_fake_a_view_written_in_place(program):
    """`F.relu(linear(x), inplace=True)` on a 3-D input writes a view of `addmm`'s output
    in place: autograd rebuilds the view's node as `AsStridedBackward0` for a plain
    tensor, whose zeroed buffer (131,072 B) a FakeTensor's replayed view never made
    (Rule 17, Note [A view written in place, in backward]). With a residual the gradient
    is held by the other branch too, and both live, as in the real run."""
    _fake_agrees(["--program", program])


def test_a_region_whose_only_read_save_is_a_buffer():
    """`h = h[:, self.perm]; self.kept = h.detach()`: the block's only save backward reads
    is the `perm` buffer, and torch's checkpoint re-runs the block at its unpack all the
    same, its frame holding the block's input until then. The replay held no frame for a
    call whose only read saves were model state: 132,396 B under (the input, 131,072 B,
    and the RNG state)."""
    _exact(["--program", "none/;none/gather kept;none/"], ["checkpoint:blocks.1"])


def test_a_region_whose_only_read_save_is_a_buffer_with_a_dead_save():
    """`h = h[:, self.perm]; self.kept = h.detach(); h.sin()`: the dropped `sin` saves the
    kept tensor and dies unread. Read by the kept tensor's free (the end of the steps), the
    frame was held to the end: 136,128 B over measured (131,072 B and an RNG state). The
    frame lets go of it when the save dies (`_gone_unread`)."""
    _exact(["--program", "none/normalize;none/gather kept dead_save;none/"],
           ["checkpoint:blocks.1"])


def test_a_bias_cast_under_autocast_in_a_checkpointed_block():
    """`with autocast: h = inner(h)` in a block: the bf16 bias cast (64 B, saved by no op)
    goes at the block's autocast exit in forward, but in a checkpoint's re-run torch's own
    autocast contexts keep the count of open contexts above 0, so autocast's cache holds it
    to the re-run's end (Note [Autocast's cache in a re-run], trace/collector.py): 64 B
    under measured before the `acast` record."""
    # the traced peak holds 12 B of an op's kernel scratch (Note [Kernel scratch])
    run = _exact(["--program", "none/autocast dropout_;none/;none/"],
                 ["checkpoint:blocks.*", "selective:blocks.*",
                  "checkpoint:blocks.0+offload:blocks.[1-2]"], scratch=True)
    st = run.ledger.storages.set_index("sid")
    casts = st.loc[[r["sid"] for r in run.ledger.extra["acast"]]]
    # the inner Linear's weight (32 x 32) and bias (32) in bf16, once per traced step
    assert sorted(casts["bytes"].tolist()) == [64, 64, 2048, 2048]
    assert set(casts["dtype"]) == {"bfloat16"}


def test_a_softmax_whose_scratch_hid_behind_sdpas():
    """CPU sdpa's `_safe_softmax` calls `_softmax` inside its kernel, where the dispatch mode
    never looks: the profile had 4 `_softmax` calls for the ledger's 2 events, and replay
    dropped them all, the block's own softmax's copy of its transposed input (131,072 B)
    with them. `checkpoint:blocks.*` peaks in that softmax's re-run: 131,072 B under
    measured (Note [Calls inside another op], trace/allocator.py)."""
    run = _exact(["--program", "none/;none/;none/sdpa batchnorm softmax"],
                 ["checkpoint:blocks.*", "selective:blocks.*", "offload:blocks.*"],
                 scratch=True)
    ev, b = run.ledger.kernel_scratch()
    soft = run.ledger.storages
    soft = soft[(soft["op"] == "_softmax.default") & (soft["phase"] == "forward")]
    assert dict(zip(ev.tolist(), b.tolist()))[int(soft["created"].iloc[0])] == 131_072


def test_one_linear_in_two_autocast_regions_of_a_checkpointed_block():
    """Two `with autocast: h = inner(h)` in one block: forward casts `inner`'s weight and
    bias once per region (the first region's exit clears autocast's cache), a re-run once
    in all (torch's own autocast contexts keep the cache open, so the second region finds
    the first's casts): 2,112 B over measured when both were re-made
    (`_one_cast_per_rerun`, replay/engine.py)."""
    run = _exact(["--program", "none/;none/autocast autocast;none/"],
                 ["checkpoint:blocks.*", "selective:blocks.*", "checkpoint:blocks.1",
                  "checkpoint:blocks.0+offload:blocks.[1-2]"], scratch=True)
    srcs = {r["src"] for r in run.ledger.extra["acast"]}
    assert len(srcs) == 2   # inner.weight and inner.bias, cast 4 times a step


def test_a_gru_block_offloaded():
    """torch's CPU GRU projects its whole (transposed, `batch_first`) input through
    `at::linear` before the time loop: the bias is added in place untraced, out of place
    under the tracer's mode. Unfolded, `offload:blocks.*`, which peaks in that GRU's
    forward, was 125,268 B over measured (Note [A Linear's bias, added in place but for
    the mode], trace/collector.py)."""
    run = _exact(["--program", "none/;none/;none/gru"],
                 ["offload:blocks.*", "checkpoint:blocks.*", "selective:blocks.*"])
    assert any(r["op"] == "add_" for r in run.ledger.extra["inplace"])


def test_a_draw_under_the_loops_accumulation_and_autocast():
    """The loop around the model (`--accum 2 --amp`: two micro-batches a step, forward and
    loss under bf16 autocast) on blocks that cast inside their own autocast region, run a
    GRU and sdpa: every policy exact (deep seeds 0-59 under `--loop`, docs/accuracy.md)."""
    _exact(["--program", "none/autocast dropout_;gelu/gru;none/sdpa softmax",
            "--accum", "2", "--amp"], scratch=True)


@pytest.mark.parametrize("program", ["none/groupnorm;none/;none/", "none/batchnorm;none/;none/"])
def test_fake_norms_under_cpu_autocast(program):
    """A whole forward under CPU autocast: group norm and batch norm get a bf16 input and
    fp32 weights, and their CPU kernels keep the statistics they save in fp32 (the
    mixed-type path), where the meta kernels keep bf16: the fake ledger read 1,024 B
    (GroupNorm(4, 32), batch 64) and 128 B (BatchNorm1d(32)) under the real one (Rule 10,
    trace/fake.py)."""
    _fake_agrees(["--program", program, "--amp"])


def test_a_linear_shared_by_two_blocks_under_one_autocast_region():
    """Blocks 0 and 1 call one shared Linear, the whole forward under bf16 autocast: block 1
    takes the weight's cast from autocast's cache, its re-run (in backward, the cache
    empty) casts it again. `checkpoint:blocks.*` was 2,048 B (the bf16 weight) under
    measured (`_cast_from_another_call`, replay/engine.py; deep seed 94 under `--loop`).
    Under selective that re-run's cast is an op its forward did not run, which torch
    refuses: predict refuses as measure does (it predicted a peak before)."""
    _exact(["--program", "none/shared;none/shared;none/", "--accum", "2", "--amp"],
           ["checkpoint:blocks.*", "checkpoint:blocks.1", "offload:blocks.*",
            "checkpoint:blocks.0+offload:blocks.[1-2]", "selective:blocks.*"],
           refused=("selective:blocks.*",), scratch=True)
