"""sb3-contrib (tests/clients/train_sb3c.py): Stable-Baselines3's contributed algorithms as
their users run them, `ALGO(policy, env, ...)` then `model.learn(total_timesteps=...)`.
Measured (2 steps, CPU, torch 2.13.0, sb3-contrib 2.9.2):

- RecurrentPPO, `MlpLstmPolicy` on CartPole-v1 (2 envs, 16-step rollouts, LSTMs of 8 units,
  MLP 16x16): ledger 719,440 B + 17,432 B of kernel scratch = allocator 736,872 B;
  checkpoint:lstm_actor 450,792 = 450,792; offload:lstm_critic 419,384 = 419,384;
  checkpoint:mlp_extractor.value_net+offload:lstm_actor 388,584 = 388,584. The doctor
  finds nothing.
- TQC on Pendulum-v1 (2 critics of 5 quantiles): 50,308 = 50,308; offload:critic.qf0
  48,260 = 48,260; checkpoint:actor.latent_pi 54,340 = 54,340 (the doctor: nothing).
- CrossQ on Pendulum-v1: 56,972 = 56,972; offload:actor.latent_pi 56,972 = 56,972;
  checkpoint:critic.qf0 refused alike (its BatchRenorm runs in train mode for the forward
  only, and writes its running mean in place there).
  Before: the critic was taken for the model (Note [A model of several trained parts],
  trace/roots.py): `critic.qf0` "matches no module" in predict while measure failed in
  torch's checkpoint, and the actor could not be selected at all.
- TRPO on CartPole-v1: the doctor finds nothing. Before: two `unused_parameter` warnings
  on the actor, whose gradients TRPO takes with `torch.autograd.grad` (Note [A gradient
  the script takes itself], trace/doctor_probe.py).
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("sb3_contrib") is None:
    pytest.skip("sb3-contrib is not installed", allow_module_level=True)

from tests.clients.harness import assert_one_doctor_error, run_client  # noqa: E402

pytestmark = pytest.mark.clients


@pytest.fixture(autouse=True, scope="module")
def _sb3_logs_kept_in_pytests_tmp(tmp_path_factory):
    """SB3's logger makes a folder per `learn()` in the system's temp dir; `SB3_LOGDIR`
    puts them in pytest's own (as tests/clients/test_sb3_clients.py does)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3c")))
        yield


def _policies(run) -> dict[str, tuple]:
    return {k: (p.predicted, p.measured) for k, p in run.policies.items()}


def test_recurrent_ppo_lstm_states_across_rollout_and_training_exact():
    """RecurrentPPO: the LSTMs' hidden and cell states carried from env step to env step
    under no_grad and zeroed at episode starts, each minibatch's sequences re-run from the
    stored states (one LSTM call per time step), Adam. Parameters: two LSTMs of 448, an
    MLP extractor of 2 x 416, heads of 34 and 17 (1,779 floats); Adam's two moments of
    each and a 4 B step per tensor (20 tensors)."""
    run = run_client("train_sb3c.py", ["--mode", "rppo", "--timesteps", "400"],
                     ["checkpoint:lstm_actor", "offload:lstm_critic",
                      "checkpoint:mlp_extractor.value_net+offload:lstm_actor"], steps=2)
    assert (run.ledger_peak, run.ledger.peak_with_scratch(), run.allocator_peak) == \
        (719_440, 736_872, 736_872)
    assert _policies(run) == {
        "checkpoint:lstm_actor": (450_792, 450_792),
        "offload:lstm_critic": (419_384, 419_384),
        "checkpoint:mlp_extractor.value_net+offload:lstm_actor": (388_584, 388_584)}
    st = run.ledger.storages
    by = st.groupby("category")["bytes"].sum()
    assert by["parameter"] == 4 * 1779
    assert by["optimizer_state"] == 2 * 4 * 1779 + 4 * 20
    assert_one_doctor_error("train_sb3c.py", ["--mode", "rppo", "--timesteps", "200"], 2,
                            None, "")


def test_crossq_policy_is_the_model_and_its_critic_refused_alike():
    """CrossQ steps its critic first (SB3's TD3 too): the rule for a teacher run under
    no_grad moved the model from the policy, which the rollout called, to the critic, and
    `critic.qf0` matched no module in predict while measure met torch's "A different
    number of tensors was saved" (CrossQ's BatchRenorm runs in training mode for the
    forward only). The policy stays the model (Note [A model of several trained parts]),
    and both sides say one line: the BatchRenorm's mode moved between the critic's forward
    and its backward (Note [A re-run in another mode], trace/modes.py; before hunt49i,
    predict's line for its write of `ra_mean`, Note [A re-run torch refused after a write
    of state], measure/apply.py)."""
    run = run_client("train_sb3c.py", ["--mode", "crossq", "--timesteps", "400"],
                     ["offload:actor.latent_pi", "checkpoint:critic.qf0"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 56_972
    assert _policies(run)["offload:actor.latent_pi"] == (56_972, 56_972)
    p = run.policies["checkpoint:critic.qf0"]
    assert p.predicted is None and p.measured is None
    assert p.predict_refusal == p.measure_refusal, p
    # the BatchRenorm back in eval before the backward: Note [A re-run in another mode]
    # (trace/modes.py), said before the write the train-mode forward made (hunt49i)
    assert "would re-run critic.qf0 in eval mode (its critic.qf0.0 first), while its " \
        "forward ran in train mode" in p.predict_refusal
    params = set(run.ledger.storages.query("category == 'parameter'")["name"])
    assert {"actor.mu.weight", "critic.qf0.1.weight"} <= params, sorted(params)


def test_tqc_exact_and_trpo_doctor_silent():
    """TQC: quantile critics, `critic_target` moved by Polyak under no_grad, three
    optimizers per gradient step. TRPO takes the actor's gradients with
    `torch.autograd.grad` and moves it by line search; the doctor said "6 trainable
    parameters (`mlp_extractor.policy_net.0.weight`, ...) got no gradient in step 1 while
    6 others did: their modules ran but the output never reached the loss"."""
    run = run_client("train_sb3c.py", ["--mode", "tqc", "--timesteps", "400"],
                     ["offload:critic.qf0", "checkpoint:actor.latent_pi"], steps=2)
    assert run.ledger_peak == run.allocator_peak == 50_308
    assert _policies(run) == {"offload:critic.qf0": (48_260, 48_260),
                              "checkpoint:actor.latent_pi": (54_340, 54_340)}
    assert_one_doctor_error("train_sb3c.py", ["--mode", "trpo", "--timesteps", "200"], 2,
                            None, "")
