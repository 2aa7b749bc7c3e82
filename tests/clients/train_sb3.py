"""Stable-Baselines3 as its users write it: `model = ALGO("MlpPolicy", env, ...)`, then
`model.learn(total_timesteps=...)`, on a gymnasium classic-control environment (no
rendering, nothing downloaded). SB3 runs the whole loop: environment steps in numpy,
the policy's forward under `no_grad` while collecting, its own buffers (numpy arrays,
turned into tensors per minibatch), `optimizer.step()` inside `model.learn`.

- `ppo` (CartPole-v1): a rollout of `--n-steps` per env under `no_grad` into a numpy
  RolloutBuffer, then `--epochs` epochs of shuffled minibatches, each a clipped surrogate
  + value + entropy loss, `clip_grad_norm_` and an Adam step. The policy's blocks:
  `mlp_extractor.policy_net`, `mlp_extractor.value_net`, `action_net`, `value_net`.
- `a2c` (CartPole-v1): one RMSprop step per rollout of 5 env steps, `clip_grad_norm_`.
- `dqn` (CartPole-v1): `q_net` and `q_net_target` (copied by `polyak_update` under
  `no_grad`, in place), a numpy ReplayBuffer, epsilon-greedy under `no_grad`, a Huber TD
  loss, `clip_grad_norm_`, Adam.
- `sac` (Pendulum-v1): three optimizers per gradient step (the entropy coefficient's, a bare
  `log_ent_coef` tensor, then the critic's, then the actor's), twin critics, a
  `critic_target` updated by Polyak. Blocks: `actor.latent_pi`, `actor.mu`,
  `critic.qf0`, `critic.qf1`.
- `td3` (Pendulum-v1): a critic step every gradient step, an actor step every
  `policy_delay` (2) steps, `actor_target` and `critic_target`.

Policies are small (`net_arch=[32, 32]`), seeded (`seed=0`), on CPU.

    python tests/clients/train_sb3.py --mode ppo
    memledger trace tests/clients/train_sb3.py --steps 3 -o sb3.ledger -- --mode ppo
    memledger compare tests/clients/train_sb3.py -p 'checkpoint:mlp_extractor.policy_net' -- --mode ppo
    memledger doctor tests/clients/train_sb3.py -- --mode sac

`--timesteps`: environment steps `model.learn` runs (enough for the timed steps after the
traced ones); `--envs`: environments run side by side (DummyVecEnv, on-policy modes);
`--sde`: gSDE exploration (ppo and a2c then on Pendulum-v1); `--image`: `CnnPolicy`
(NatureCNN, 32 features) on a custom environment of 36x36 uint8 images (SAC's actor and
critic each have their own CNN; PPO's policy and value heads share one);
`--callbacks`: a CheckpointCallback (`model.save` every 40 env steps) and an EvalCallback
(2 episodes every 40); `--dict`: `MultiInputPolicy` on a custom environment whose
observations are a dict of two vectors (ppo, a2c, dqn).
"""

import argparse
import tempfile
import warnings

import numpy as np
import torch


def image_env(discrete: bool):
    """A custom environment as SB3's docs show one: 36x36 grey images (uint8, channel
    first), a reward for matching the image's mean, episodes of 16 steps."""
    import gymnasium as gym
    from gymnasium import spaces

    class ImageEnv(gym.Env):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = spaces.Box(0, 255, (1, 36, 36), dtype=np.uint8)
            self.action_space = spaces.Discrete(2) if discrete else \
                spaces.Box(-1.0, 1.0, (1,), dtype=np.float32)
            self.t = 0

        def _obs(self):
            return self.np_random.integers(0, 256, (1, 36, 36), dtype=np.uint8)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            self.last = self._obs()
            return self.last, {}

        def step(self, action):
            self.t += 1
            reward = float(-abs(float(np.asarray(action).mean()) - self.last.mean() / 255))
            self.last = self._obs()
            return self.last, reward, False, self.t >= 16, {}

    return ImageEnv


def dict_env():
    """A custom environment with a Dict observation (`MultiInputPolicy`, CombinedExtractor):
    a 4-vector and a 3-vector, 2 actions, episodes of 16 steps."""
    import gymnasium as gym
    from gymnasium import spaces

    class DictEnv(gym.Env):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = spaces.Dict({
                "pos": spaces.Box(-1.0, 1.0, (4,), dtype=np.float32),
                "goal": spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)})
            self.action_space = spaces.Discrete(2)
            self.t = 0

        def _obs(self):
            return {"pos": self.np_random.uniform(-1, 1, 4).astype(np.float32),
                    "goal": self.np_random.uniform(-1, 1, 3).astype(np.float32)}

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return self._obs(), {}

        def step(self, action):
            self.t += 1
            return self._obs(), float(action), False, self.t >= 16, {}

    return DictEnv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ppo", "a2c", "dqn", "sac", "td3"], default="ppo")
    ap.add_argument("--timesteps", type=int, default=2000)
    ap.add_argument("--envs", type=int, default=1)
    ap.add_argument("--n-steps", type=int, default=64)     # ppo: env steps per rollout per env
    ap.add_argument("--batch", type=int, default=32)       # minibatch (ppo) / replay sample
    ap.add_argument("--epochs", type=int, default=2)       # ppo: epochs over each rollout
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--sde", action="store_true")          # ppo/sac/a2c: gSDE exploration
    ap.add_argument("--image", action="store_true")        # CnnPolicy on a custom image env
    ap.add_argument("--callbacks", action="store_true")    # CheckpointCallback + EvalCallback
    ap.add_argument("--dict", action="store_true")         # MultiInputPolicy, Dict obs
    args = ap.parse_args()

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    from stable_baselines3 import A2C, DQN, PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env

    arch = [args.width, args.width]
    common = dict(seed=0, device="cpu", verbose=0)
    sde = dict(use_sde=True, sde_sample_freq=4) if args.sde else {}
    policy = "CnnPolicy" if args.image else "MultiInputPolicy" if args.dict else "MlpPolicy"
    if args.image:   # NatureCNN, its features 32 wide; actor and critic share it in PPO
        arch_kw = dict(features_extractor_kwargs=dict(features_dim=32))
    else:
        arch_kw = {}

    def make(name: str, n: int = 1):
        if args.image:
            return make_vec_env(image_env(args.mode in ("ppo", "a2c", "dqn")), n_envs=n, seed=0)
        if args.dict:
            return make_vec_env(dict_env(), n_envs=n, seed=0)
        return make_vec_env(name, n_envs=n, seed=0)

    if args.mode in ("ppo", "a2c"):
        # gSDE needs continuous actions
        env = make("Pendulum-v1" if args.sde else "CartPole-v1", args.envs)
        if args.mode == "ppo":
            model = PPO(policy, env, n_steps=args.n_steps, batch_size=args.batch,
                        n_epochs=args.epochs, policy_kwargs=dict(net_arch=arch, **arch_kw),
                        **sde,
                        **common)
        else:
            model = A2C(policy, env, n_steps=5, policy_kwargs=dict(net_arch=arch, **arch_kw),
                        **sde, **common)
    elif args.mode == "dqn":
        env = make("CartPole-v1")
        model = DQN(policy, env, learning_starts=50, buffer_size=1000,
                    batch_size=args.batch, train_freq=4, target_update_interval=8,
                    tau=0.5, policy_kwargs=dict(net_arch=arch, **arch_kw), **common)
    else:
        env = make("Pendulum-v1")
        algo = SAC if args.mode == "sac" else TD3
        model = algo(policy, env, learning_starts=50, buffer_size=1000,
                     batch_size=args.batch, policy_kwargs=dict(net_arch=arch, **arch_kw),
                     **(sde if algo is SAC else {}), **common)
    callbacks = []
    if args.callbacks:   # save every 40 env steps, evaluate 2 episodes every 40
        from stable_baselines3.common.callbacks import CheckpointCallback, EvalCallback

        folder = tempfile.mkdtemp(prefix="sb3-")
        callbacks = [CheckpointCallback(save_freq=40, save_path=folder),
                     EvalCallback(make("Pendulum-v1" if args.mode in ("sac", "td3") or args.sde
                                       else "CartPole-v1"), eval_freq=40, n_eval_episodes=2,
                                  verbose=0)]
    model.learn(total_timesteps=args.timesteps, callback=callbacks)


if __name__ == "__main__":
    main()
