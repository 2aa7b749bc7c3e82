"""Loops of their own kind. Reinforcement learning (tests/clients/train_rl.py): PPO's
rollout under `no_grad` into buffers written in place, then shuffled minibatches of an
actor-critic; DQN with a target network the optimizer never sees, a replay buffer and a
Polyak update in place. Each is traced and every policy predicted against its measured
allocator peak. And a DataLoader with worker processes (tests/clients/train_loader.py)."""

from tests.clients.harness import gaps_of, run_client


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
