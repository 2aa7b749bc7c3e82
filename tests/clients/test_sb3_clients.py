"""Stable-Baselines3 (tests/clients/train_sb3.py): `model.learn()` runs the loop; policies
collect rollouts under `no_grad`, keep target networks moved by `polyak_update`, and SAC
steps three optimizers per gradient step. Skipped without stable_baselines3."""

from __future__ import annotations

import pytest

from memledger.replay.plan import plan
from memledger.replay.policies import parse_policy
from memledger.replay.predict import predict, unprobed_line
from tests.clients.harness import assert_one_doctor_error, imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("stable_baselines3")
_imported = imported_first("stable_baselines3")


@pytest.fixture(autouse=True, scope="module")
def _sb3_logs_kept_in_pytests_tmp(tmp_path_factory):
    """SB3's logger makes a folder per `learn()` in the system's temp dir (`SB3-<date>`, empty
    with `verbose=1`): 11 of them a run of this file, left behind. `SB3_LOGDIR` puts them in
    pytest's own temp dir, which pytest prunes."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3")))
        yield


def _exact(run) -> None:
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        if not p.predict_refusal:
            assert p.predicted == p.measured, (text, p)


def test_sac_exact_and_its_target_critic_is_no_orphan():
    """SAC: the entropy coefficient's, the critic's and the actor's optimizers, twin critics
    and `critic_target` (in the policy, `requires_grad` on, run under no_grad, moved by
    Polyak). Every byte explained, offload predicted = measured, and the
    doctor silent: it read "12 trainable parameters (`critic_target.qf0.0.weight`, ...) are
    in no optimizer: they get gradients but never change" (Note [Parameters no optimizer
    holds], doctor/params.py); they get none, and they change. SB3 never calls
    `SACPolicy.forward` (it calls `actor.action_log_prob` and `critic(...)`), so trace's
    probes have no call of the model to re-run: predict said "the script ended before
    trace's probes ran" (Note [A model never called whole], trace/timing.py)."""
    run = run_client("train_sb3.py", ["--mode", "sac", "--timesteps", "80"],
                     ["offload:critic.qf0"], steps=2,
                     timing_steps=2)
    assert run.summary.steps_traced == 2
    _exact(run)
    st = run.ledger.storages
    # Adam's two moments of every trained parameter, 4 B each (fp32), plus the step
    # counters (4 B each): critic 2 x 1,249 + actor 1,250 + log_ent_coef 1 parameters, in
    # 12 + 8 + 1 tensors; critic_target's 2 x 1,249 in no optimizer
    opt = int(st.loc[st["category"] == "optimizer_state", "bytes"].sum())
    assert opt == 2 * 4 * (2 * 1249 + 1250 + 1) + 4 * (12 + 8 + 1)
    timing = run.ledger.extra["timing"][0]
    assert timing["probes_skipped"] == "uncalled" and timing["step_ns"], timing
    rep = predict(run.ledger, [parse_policy("offload:critic.qf0")], bandwidth=1e9)
    assert unprobed_line(rep).endswith("the script's timed steps made none (it calls the "
                                       "model's parts)")
    assert_one_doctor_error("train_sb3.py", ["--mode", "sac", "--timesteps", "60"], 2, None, "")


def test_dqn_model_named_at_its_first_step_and_its_target_refused_alike():
    """DQN calls `q_net_target` (under no_grad) before `q_net`, so `q_net` is named the
    model at the first optimizer step (Note [The model]). Its first step's gradients kept
    the label it had before, `QNetwork.q_net.2.weight` beside the later steps'
    `q_net.2.weight` (Note [Gradients renamed with the model]); predict's refusal of the
    target listed "(the model, QNetwork, q_net_target)", the model twice, and said it was
    "the first top-level module with parameters the script called", while measure said
    "selector 'q_net_target' matches no module" (Note [A model's former label]).

    `plan` under the baseline's peak: `q_net` is Sequential(Linear, ReLU, Linear, ReLU,
    Linear), each ReLU's output saved by it and by the next Linear, so offloading one of
    them alone moves nothing and both together do. Plan summed the layers' effects and
    said "no candidate fits 39,999 bytes; the lowest predicted peak is 40,000" of its
    1,024 assignments; it plans those as one unit now and finds `offload:q_net.[1-2]`,
    39,620 B, measured alike (Note [Blocks that share a save], replay/plan.py)."""
    run = run_client("train_sb3.py", ["--mode", "dqn"],
                     ["offload:q_net.[1-2]", "checkpoint:q_net_target"], steps=2)
    _exact(run)
    rep = plan(run.ledger, run.ledger_peak - 1)
    assert rep.units == [["q_net.0"], ["q_net.1", "q_net.2"], ["q_net.3", "q_net.4"]]
    assert (rep.fits, rep.policy, rep.predicted_peak_bytes) == \
        (True, "offload:q_net.[1-2]", run.policies["offload:q_net.[1-2]"].measured), rep.policy
    st = run.ledger.storages
    params = set(st.loc[st["category"] == "parameter", "name"])
    grads = set(st.loc[st["category"] == "gradient", "name"])
    assert grads == {n for n in params if not n.startswith("q_net_target.")}, grads
    p = run.policies["checkpoint:q_net_target"]
    assert p.predicted is None and p.measured is None
    assert p.predict_refusal == p.measure_refusal, p
    assert "(a QNetwork: the top-level module the first optimizer step trained)" in \
        p.predict_refusal and "put it and 'q_net_target' in one" in p.predict_refusal, p


def test_ppo_exact_and_its_costs_probed():
    """PPO: rollouts under no_grad, 2 epochs of minibatches, `clip_grad_norm_`, Adam. The
    probes re-run `ActorCriticPolicy.forward` as a rollout called it, whose first output
    is the sampled actions (int64): every probe step raised "no differentiable output"
    and `recompute_factor` was [] (Note [A probe's loss], trace/timing.py)."""
    # 5 timed steps: a rollout (4 minibatch steps apart) calls the policy's forward in them
    run = run_client("train_sb3.py", ["--mode", "ppo"],
                     ["checkpoint:mlp_extractor.policy_net"], steps=2, timing_steps=5)
    _exact(run)
    timing = run.ledger.extra["timing"][0]
    assert timing["recompute_factor"] and timing["offload_probe"], timing
