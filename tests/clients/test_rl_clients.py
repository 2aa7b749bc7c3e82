"""Reinforcement-learning loops (tests/clients/train_rl.py): PPO's rollout under `no_grad`
into buffers written in place, then shuffled minibatches of an actor-critic; DQN with a
target network the optimizer never sees, a replay buffer and a Polyak update in place.
Each is traced and every policy predicted against its measured allocator peak."""

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
