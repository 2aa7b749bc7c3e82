"""sb3-contrib (Stable-Baselines3's contributed algorithms) as its users write them:
`model = ALGO(policy, env, ...)`, then `model.learn(total_timesteps=...)`, on a gymnasium
environment built here (CartPole-v1 / Pendulum-v1 from gymnasium's classic control, or a
tiny custom one: no rendering, nothing downloaded). sb3-contrib runs the whole loop.

- `rppo` (CartPole-v1): `RecurrentPPO("MlpLstmPolicy")`. While collecting (`no_grad`) the
  LSTM's hidden and cell states are carried from one env step to the next and zeroed where
  an episode starts; in training, each minibatch's sequences are re-run through the LSTM
  from the states stored at their first step (`_process_sequence`: one LSTM call per time
  step, `(1 - episode_start) * state` between them). Separate actor and critic LSTMs
  (`lstm_actor`, `lstm_critic`) of `--lstm` units, then the MLP extractor
  (`mlp_extractor.policy_net`, `mlp_extractor.value_net`), `action_net`, `value_net`.
  `--shared-lstm`: one LSTM for both (the critic's states detached).
- `tqc` (Pendulum-v1): `TQC("MlpPolicy")`: `--critics` quantile critics (`critic.qf0`, ...)
  of `--quantiles` quantiles each, the top ones dropped, a quantile Huber loss; a
  `critic_target` moved by `polyak_update` under `no_grad`; three optimizers per gradient
  step (the entropy coefficient's, the critic's, the actor's).
- `mppo`: `MaskablePPO("MlpPolicy")` on a custom environment with `action_masks()`
  (5 actions, some masked each step): the masked categorical's logits filled with a large
  negative where masked, in the rollout and in training.
- `qrdqn` (CartPole-v1): `QRDQN`, quantile regression Q-network with a target;
  `trpo` (CartPole-v1): `TRPO`, a conjugate-gradient step on the policy (Hessian-vector
  products by double backward), line search without an optimizer, then Adam on the critic;
  `crossq` (Pendulum-v1): `CrossQ`, batch-renormalized critics, no target network.

Policies are small (`net_arch=[--width, --width]`), seeded (`seed=0`), on CPU.

    python tests/clients/train_sb3c.py --mode rppo
    memledger trace tests/clients/train_sb3c.py --steps 2 -o rppo.ledger -- --mode rppo
    memledger compare tests/clients/train_sb3c.py -p 'checkpoint:lstm_actor' -- --mode rppo
    memledger doctor tests/clients/train_sb3c.py -- --mode tqc
"""

import argparse
import warnings

import numpy as np
import torch


def masked_env():
    """A custom environment with invalid actions, as MaskablePPO's docs describe one: 5
    actions, `action_masks()` allows the ones whose index differs from the step's parity
    plus action 0; an observation of 6 floats; episodes of 16 steps."""
    import gymnasium as gym
    from gymnasium import spaces

    class MaskedEnv(gym.Env):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = spaces.Box(-1.0, 1.0, (6,), dtype=np.float32)
            self.action_space = spaces.Discrete(5)
            self.t = 0

        def action_masks(self) -> np.ndarray:
            return np.array([a == 0 or a % 2 == self.t % 2 for a in range(5)])

        def _obs(self):
            return self.np_random.uniform(-1, 1, 6).astype(np.float32)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            reward = 1.0 if self.action_masks()[int(action)] else -1.0
            self.t += 1
            return self._obs(), reward, False, self.t >= 16, {}

    return MaskedEnv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["rppo", "tqc", "mppo", "qrdqn", "trpo", "crossq"],
                    default="rppo")
    ap.add_argument("--timesteps", type=int, default=2000)
    ap.add_argument("--envs", type=int, default=2)         # on-policy modes: side by side
    ap.add_argument("--n-steps", type=int, default=16)     # env steps per rollout per env
    ap.add_argument("--batch", type=int, default=16)       # minibatch / replay sample
    ap.add_argument("--epochs", type=int, default=2)       # ppo modes: epochs per rollout
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--lstm", type=int, default=8)         # rppo: LSTM hidden units
    ap.add_argument("--shared-lstm", action="store_true")  # rppo: one LSTM, actor and critic
    ap.add_argument("--critics", type=int, default=2)      # tqc
    ap.add_argument("--quantiles", type=int, default=5)    # tqc / qrdqn
    args = ap.parse_args()

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from stable_baselines3.common.env_util import make_vec_env

    arch = [args.width, args.width]
    common = dict(seed=0, device="cpu", verbose=0)
    if args.mode == "rppo":
        from sb3_contrib import RecurrentPPO

        env = make_vec_env("CartPole-v1", n_envs=args.envs, seed=0)
        lstm = dict(lstm_hidden_size=args.lstm, n_lstm_layers=1)
        if args.shared_lstm:
            lstm.update(shared_lstm=True, enable_critic_lstm=False)
        model = RecurrentPPO("MlpLstmPolicy", env, n_steps=args.n_steps,
                             batch_size=args.batch, n_epochs=args.epochs,
                             policy_kwargs=dict(net_arch=arch, **lstm), **common)
    elif args.mode == "mppo":
        from sb3_contrib import MaskablePPO

        env = make_vec_env(masked_env(), n_envs=args.envs, seed=0)
        model = MaskablePPO("MlpPolicy", env, n_steps=args.n_steps, batch_size=args.batch,
                            n_epochs=args.epochs, policy_kwargs=dict(net_arch=arch),
                            **common)
    elif args.mode == "trpo":
        from sb3_contrib import TRPO

        env = make_vec_env("CartPole-v1", n_envs=args.envs, seed=0)
        model = TRPO("MlpPolicy", env, n_steps=args.n_steps, batch_size=args.batch,
                     n_critic_updates=2, cg_max_steps=4,
                     policy_kwargs=dict(net_arch=arch), **common)
    elif args.mode == "qrdqn":
        from sb3_contrib import QRDQN

        env = make_vec_env("CartPole-v1", seed=0)
        model = QRDQN("MlpPolicy", env, learning_starts=50, buffer_size=1000,
                      batch_size=args.batch, train_freq=4, target_update_interval=8,
                      policy_kwargs=dict(net_arch=arch, n_quantiles=args.quantiles),
                      **common)
    else:
        from sb3_contrib import TQC, CrossQ

        env = make_vec_env("Pendulum-v1", seed=0)
        if args.mode == "tqc":
            model = TQC("MlpPolicy", env, learning_starts=50, buffer_size=1000,
                        batch_size=args.batch, top_quantiles_to_drop_per_net=1,
                        policy_kwargs=dict(net_arch=arch, n_critics=args.critics,
                                           n_quantiles=args.quantiles), **common)
        else:
            model = CrossQ("MlpPolicy", env, learning_starts=50, buffer_size=1000,
                           batch_size=args.batch, policy_kwargs=dict(net_arch=arch),
                           **common)
    model.learn(total_timesteps=args.timesteps)


if __name__ == "__main__":
    main()
