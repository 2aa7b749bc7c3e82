"""Loops of their own kind. Reinforcement learning (tests/clients/train_rl.py): PPO's
rollout under `no_grad` into buffers written in place, then shuffled minibatches of an
actor-critic; DQN with a target network the optimizer never sees, a replay buffer and a
Polyak update in place. Each is traced and every policy predicted against its measured
allocator peak. And a DataLoader with worker processes (tests/clients/train_loader.py)."""

import pytest

from memledger.replay.policies import parse_policy
from tests.clients.harness import fake_client_gaps, gaps_of, ledger_pass, run_client


def test_ppo_every_policy_predicted_as_measured():
    run = run_client("train_rl.py", ["--case", "ppo"],
                     ["checkpoint:actor", "selective:actor", "offload:critic",
                      "checkpoint:actor.[0-2]"], steps=3)
    assert gaps_of(run) == {}


def test_dqn_a_region_whose_only_save_a_node_outside_keeps_is_still_re_run():
    """`checkpoint:3` wraps a Tanh whose output the next Linear saves too: nothing the region
    saved can be dropped, and the replay made no re-run of it; torch's checkpoint re-runs
    the region all the same at the first unpack of its save and keeps the re-made output
    for TanhBackward (64 x 64 fp32, 16,384 B; with its RNG state and the frame's input the
    prediction was 11,768 B under measured). Now every policy exact."""
    run = run_client("train_rl.py", ["--case", "dqn"],
                     ["checkpoint:3", "checkpoint:[0-1]", "selective:[0-3]", "offload:*"],
                     steps=3)
    assert gaps_of(run) == {}
    assert run.policies["checkpoint:3"].measured - run.ledger_peak == 18_884


def test_batches_from_dataloader_workers_are_input_as_they_arrive():
    """Note [Batches from other processes]: a DataLoader's workers hand each batch over in
    shared memory and the loader fetches ahead, so batches wait in the main process before
    the step uses them. They were `temporary` (made between steps, not used there); now
    `input` from their arrival, op "(shared memory)", and the summary says how much of the
    peak they are. How many wait at one moment is the workers' timing, so the allocator
    pass's run may hold whole batches more or fewer: the ledger (with its kernel scratch)
    differs from the allocator by whole batches (images 64 x 3 x 32 x 32 fp32 and labels
    64 int64), never by part of one."""
    x_bytes, y_bytes = 64 * 3 * 32 * 32 * 4, 64 * 8
    run = run_client("train_loader.py", ["--workers", "2"], [], steps=3)
    st = run.ledger.storages
    shared = st[st["op"] == "(shared memory)"]
    assert len(shared) >= 2 * 3 and set(shared["category"]) == {"input"}
    assert sorted(set(shared["bytes"])) == [y_bytes, x_bytes]
    si = run.summary.shared_input
    assert si is not None and si.bytes % (x_bytes + y_bytes) == 0 and si.bytes > 0
    assert (run.allocator_peak - run.ledger.peak_with_scratch()) % (x_bytes + y_bytes) == 0


def test_a_fake_run_loads_a_workers_batches_in_its_own_process():
    """Note [A DataLoader's workers in a fake run] (trace/fake_loader.py): a forked worker
    of a fake run died at its collate (a real shared storage under a meta fake), and `trace
    --fake` stopped with exit 3 where the script runs. Now the batches load in the run's
    process and arrive as from shared memory: with one worker fetching one batch ahead
    (none waits), the fake ledger is the real one, 10,246,832 B at step 1's optimizer, of
    it one batch of input (64 x 3 x 32 x 32 fp32 + 64 int64 = 786,944 B), and the batches
    are freed as the loop lets them go (FakeTensorMode's cache kept every storage `set_`
    met: step 3's peak held all 3 batches)."""
    argv = ["--workers", "1", "--prefetch", "1", "--steps", "4"]
    real, fake = ledger_pass("train_loader.py", argv, steps=3), \
        ledger_pass("train_loader.py", argv, steps=3, fake_device="cpu")
    assert fake.peak().bytes == real.peak().bytes == 10_246_832
    assert fake.at_peak() == {**real.at_peak(), "workspace": 0}
    assert fake.at_peak()["input"] == 64 * 3 * 32 * 32 * 4 + 64 * 8
    for led in (real, fake):
        st = led.storages
        shared = st[st["op"] == "(shared memory)"]
        assert len(shared) == 2 * 3 and set(shared["category"]) == {"input"}


def test_a_run_resumed_from_a_checkpoint_keeps_its_optimizer_state():
    """Note [Memory torch's allocator did not hand out] (trace/external.py): `torch.load`'s
    storages are non-resizable, as numpy's are, but torch's CPU allocator made them; read
    as external, a resumed run's optimizer state (which `optimizer.load_state_dict` keeps as
    loaded) was missing from the ledger: 1,093,728 B of 3.1 MiB under the allocator, no
    `optimizer_state` at the peak. Now the ledger equals the allocator, AdamW's state is 2 x
    the parameters (plus its two step counters), and every policy is predicted exactly."""
    run = run_client("train_resume.py", ["--format", "torch"],
                     ["checkpoint:1", "checkpoint:[0-1]", "offload:0"], steps=3)
    assert gaps_of(run) == {}
    params = (256 * 512 + 512 + 512 * 10 + 10) * 4
    assert run.summary.at_peak["optimizer_state"] == 2 * params + 4 * 4


@pytest.mark.parametrize("fmt, policies", [
    ("from-pretrained", ["offload:model.layers.*", "checkpoint:model.layers.0.mlp"]),
    ("torch-mmap", ["checkpoint:1"]),
    ("safetensors", ["checkpoint:1"])])
def test_weights_over_a_mapped_file_are_counted_with_the_mapping(fmt, policies):
    """Note [Storages over a mapped file] (trace/mapped.py): `from_pretrained` (safetensors
    maps the file; transformers loads it in a thread of its own), `torch.load(mmap=True)`
    and safetensors' `load_file` give tensors that are slices of one mapping, which the
    profiler counts once, whole. They were left out: the fine-tuned Llama had no
    `parameter` (the ledger 429,408 B under the allocator, shown as `workspace`), the mmap
    resume 1,645,553 B under. Now each slice is counted with its role, the file's rest
    (header, pickle) is one row of its own, and the ledger equals the allocator."""
    if fmt != "torch-mmap":
        pytest.importorskip("safetensors")
    if fmt == "from-pretrained":
        pytest.importorskip("transformers")
    run = run_client("train_resume.py", ["--format", fmt], policies, steps=3)
    assert gaps_of(run) == {}
    st = run.ledger.storages
    if fmt == "from-pretrained":
        assert run.summary.at_peak["parameter"] == 427_264    # 2 layers, dim 64, vocab 256
        (rest,) = st.loc[st["op"] == "(mapped file's rest)", "bytes"]   # the JSON header
        assert 0 < rest < 8192


def test_a_fake_run_of_weights_loaded_for_real_reads_them_as_the_parameters(tmp_path):
    """Note [Fake runs], Rule 20 (trace/fake.py): a fake run of a fine-tune from
    `from_pretrained` holds real weights (the mapped file's slices), which FakeTensorMode
    fakes for each op that reads them. The fake is the same memory as the weight; it was a
    storage of its own, first met as the output of the `t()` every Linear takes of its
    weight, then saved by `mm`: 360,448 B of `activation` (17 %) over the real run. Now the
    fake ledger equals the real one in every category, and predicts as it does."""
    pytest.importorskip("transformers")
    pytest.importorskip("safetensors")
    from tests.clients.train_resume import write_pretrained

    write_pretrained(str(tmp_path))
    assert fake_client_gaps("train_resume.py", ["--format", "from-pretrained", "--pretrained",
                                                 str(tmp_path)],
                            ["offload:model.layers.*", "checkpoint:model.layers.0.mlp"]) == {}


def test_weights_from_a_file_deleted_before_their_first_use():
    """Note [Storages over a mapped file]: `from_pretrained` of a folder deleted as soon as
    the model is loaded (tests/clients/train_hf_arch.py --from-pretrained: a temporary
    folder), its weights first used in the traced thread after that. The file's size (what
    the profiler counted) was read as the mapping's length, rounded up to pages: the
    file's rest 536 B over on BART; /proc/self/map_files still has the file's size."""
    pytest.importorskip("transformers")
    run = run_client("train_hf_arch.py", ["--arch", "bart", "--from-pretrained"],
                     ["checkpoint:model.decoder.layers.0"], steps=2)
    assert gaps_of(run) == {}


def test_the_doctor_names_the_model_copy_only_the_garbage_collector_frees():
    """transformers' Mamba written by `save_pretrained` and let go of: its backbone holds a
    load-state-dict hook bound to itself, so its parameters (327,424 B, the bytes a
    checkpoint policy's measurement once read under its prediction) stay until Python's
    collector runs. A young garbage object one of Python's own collections found mid-step,
    held to the boundary, once kept it reachable at the boundary's scan: no finding."""
    pytest.importorskip("transformers")
    from pathlib import Path

    from memledger.doctor.run import diagnose_in_process

    script = Path(__file__).with_name("train_hf_arch.py")
    report, outcome = diagnose_in_process(script, ["--arch", "mamba", "--from-pretrained"], 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.evidence["bytes"], f.evidence["tensors"], f.evidence["steps"]) == (
        "cyclic_garbage", 327_424, 22, [1])
    assert "a dropped `MambaModel` that refers back to itself" in f.message
    assert f.evidence["cycle"].startswith(
        "MambaModel → ._load_state_dict_pre_hooks → ")


def test_the_doctor_names_a_forward_whose_graph_no_backward_used():
    """Note [A graph no backward used]: tests/clients/train_distill.py projects the batch
    with `proj(x).detach()` under gradients, so each step's `proj` graph is dropped unused
    (a call after the step's boundary is the next step's; the last is not judged); the
    spectral and weight norms of train_rnn.py, whose parametrizations run as modules when
    a weight is read, are no forward."""
    from pathlib import Path

    from memledger.doctor.run import diagnose_in_process

    here = Path(__file__).parent
    report, outcome = diagnose_in_process(here / "train_distill.py", [], 3)
    assert outcome.code == 0, outcome.reason
    (f,) = [f for f in report.findings if f.check == "unused_graph"]
    assert (f.evidence["var"], f.evidence["calls"], f.evidence["steps"]) == ("proj", 3, [1, 2, 3])
    assert f.where.line == next(i for i, s in enumerate(
        (here / "train_distill.py").read_text().splitlines(), 1)
        if s.strip() == "out = student(proj(x).detach())")
    report, outcome = diagnose_in_process(here / "train_rnn.py", [], 2)
    assert outcome.code == 0 and report.findings == [], report.findings


UNLIKE = '''
import torch
from torch import nn


class Crop(nn.Module):
    """Keeps the first `self.width` features: an attribute, not an argument."""

    def __init__(self):
        super().__init__()
        self.lin, self.width = nn.Linear(16, 16), 16

    def forward(self, x):
        return self.lin(x)[:, : self.width].exp()   # exp saves its output: width columns


torch.manual_seed(0)
model = nn.Sequential(Crop())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model[0].width = 16
    loss = model(torch.randn(8, 16)).square().mean()
    model[0].width = 8   # set between forward and backward, as the re-run will read it
    loss.backward()
    opt.step()
    opt.zero_grad()
'''


def test_a_re_run_unlike_the_first_is_refused_in_one_line(tmp_path):
    """A region whose forward reads an attribute the script changes before backward: torch's
    checkpoint finds the re-run's saved tensors of other sizes (CheckpointError). That is
    the policy's failure, said as a refusal naming the region (exit 2), not a crash."""
    script = tmp_path / "train_unlike.py"
    script.write_text(UNLIKE)
    run = run_client(str(script), [], ["checkpoint:0"], steps=2)
    p = run.policies["checkpoint:0"]
    assert p.measured is None
    assert p.measure_refusal.startswith(
        "memledger: checkpoint:0 cannot re-run 0: torch's checkpoint found the re-run unlike "
        "the first run"), p


def test_a_re_run_unlike_the_first_names_the_region_torch_refused(tmp_path):
    """With a second region that is only offloaded, the line named every region ("cannot
    re-run 0, 1"), though 1 is never re-run; it names the region torch re-ran last, the
    one it refused (measure/apply.py `checkpoint_refusal`)."""
    script = tmp_path / "train_unlike2.py"
    script.write_text(UNLIKE.replace("nn.Sequential(Crop())",
                                     "nn.Sequential(nn.Linear(16, 16), Crop())")
                      .replace("model[0].width", "model[1].width"))
    run = run_client(str(script), [], ["offload:0+checkpoint:1"], steps=2)
    p = run.policies["offload:0+checkpoint:1"]
    assert p.measured is None
    assert p.measure_refusal.startswith(
        "memledger: offload:0+checkpoint:1 cannot re-run 1: torch's checkpoint found the "
        "re-run unlike the first run"), p


def test_fake_generation_stops_at_its_length_and_matches_the_real_run():
    """`generate` stops when `unfinished & ~(is_eos | is_max_len)` is all zero. Under `--fake`
    the EOS half is unknown, and the whole was read as the stand-in False: the loop never
    ended (TRL's GRPO trainer, thirty-fourth session). A known operand now decides `&` and
    `|` (Rule 3, `_absorbed` in trace/fake.py): the fake run generates the 8 tokens the
    real one did, and its ledger is the real one's to the byte (647,384 B)."""
    assert fake_client_gaps("train_generate.py", ["--steps", "3"],
                            ["checkpoint:transformer.h.*"]) == {}


def test_frames_a_kept_graph_holds_are_predicted():
    """A backward that keeps its graph (`create_graph=True`) holds each node it ran, and under
    a checkpoint the node's saves hold the region's frame and its 5,056 B RNG state, until
    the script drops the graph (Note [A node a kept graph holds on], trace/collector.py).
    WGAN-GP's critic under `checkpoint:*` peaks inside the penalty's `autograd.grad`:
    predicted 1,036,368 B against 1,051,536 B measured (three frames let go too soon);
    MAML's inner step under `checkpoint:[0-2]` 97,688 against 111,896. Now exact."""
    run = run_client("train_wgan_gp.py", [], ["checkpoint:*"], steps=2)
    assert gaps_of(run) == {}
    assert run.policies["checkpoint:*"].measured == 1_051_536
    run = run_client("train_maml.py", ["4"], ["checkpoint:[0-2]"], steps=2)
    assert gaps_of(run) == {}
    assert run.policies["checkpoint:[0-2]"].measured == 111_896


def test_higher_order_reads_through_a_region_are_measured_not_predicted():
    """A physics-informed network takes `u_x` and then `u_xx` with `create_graph=True`: two
    graph-building backward passes read the blocks' saves, and each holds its own re-made
    copy (Note [Read by a backward that builds a graph], trace/collector.py). The replay
    priced one: `checkpoint:blocks.*` predicted 2,837,136 B, measured 3,197,584 B (256
    points). Predict now refuses it as NotPredicted (`compare` measures and judges it);
    measure runs it."""
    from memledger.errors import NotPredicted
    from memledger.replay.predict import predict

    run = run_client("train_pinn.py", ["--points", "64", "--steps", "3"],
                     ["checkpoint:blocks.*"], steps=2)
    p = run.policies["checkpoint:blocks.*"]
    assert p.predicted is None and p.measured == 999_956 > run.ledger_peak == 895_824, p
    assert p.predict_refusal.startswith("memledger: checkpoint:blocks.* would re-run blocks.0, "
                                        "whose saves two backward passes that build graphs "
                                        "read"), p
    with pytest.raises(NotPredicted):
        predict(run.ledger, [parse_policy("offload:blocks.*")])


def test_a_graph_the_gradients_hold_is_measured_not_predicted():
    """AdaHessian: `loss.backward(create_graph=True)` builds a graph that `.grad` holds past
    the optimizer step, with what it read back under a policy: `offload:*` predicted 832,616 B
    against 1,006,184 B measured. NotPredicted now, measured; a gradient penalty's one
    graph-building pass (WGAN-GP, above) stays predicted, exactly. Measured 906,344 B since
    the offloader reads the parameters' storages at each region call: torch_optimizer's
    step gives all 6 new storages, and those were written out as saved activations
    (Note [A parameter given a new storage], measure/offload.py)."""
    pytest.importorskip("torch_optimizer")
    run = run_client("train_adahessian.py", ["--steps", "3"], ["offload:*"], steps=2)
    p = run.policies["offload:*"]
    assert p.predicted is None and p.measured == 906_344, p
    assert "a backward that builds a graph and writes the gradients reads" in p.predict_refusal
