"""Reinforcement-learning loops, as CleanRL-style single-file scripts write them, on a toy
environment written in torch (no gym, no download):

- `ppo`: an actor-critic (two MLP towers) collects a rollout under `no_grad` into
  preallocated buffers written in place, computes GAE advantages backwards in time, then
  runs several epochs of shuffled minibatches (`b_obs[idx]`), each a clipped surrogate +
  clipped value + entropy loss, `clip_grad_norm_` and an Adam step;
- `dqn`: a Q-network, a target network (a deep copy the optimizer never sees), a replay
  buffer of preallocated tensors, epsilon-greedy actions under `no_grad`, a Huber TD loss
  and a Polyak update of the target written in place under `no_grad` every other step.

    python tests/clients/train_rl.py --case ppo --steps 6
    memledger trace tests/clients/train_rl.py --steps 4 -- --case dqn
    memledger compare tests/clients/train_rl.py -p 'checkpoint:actor' -- --case ppo
"""
import argparse
import copy

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical

OBS, ACTIONS, ENVS, HIDDEN = 8, 4, 16, 64


class ToyEnv:
    """Vectorised: each env's state moves by a fixed linear map of the state and the action
    taken, plus noise; the reward is how close the state stays to 0; an episode lasts 20
    steps, after which the env starts again from a random state."""

    def __init__(self, n: int, g: torch.Generator) -> None:
        self.g = g
        self.a = torch.randn(OBS, OBS, generator=g) * 0.3
        self.b = torch.randn(ACTIONS, OBS, generator=g) * 0.5
        self.state = torch.randn(n, OBS, generator=g)
        self.t = torch.zeros(n, dtype=torch.long)

    def step(self, action: torch.Tensor):
        noise = torch.randn(self.state.shape, generator=self.g) * 0.1
        self.state = torch.tanh(self.state @ self.a + self.b[action] + noise)
        reward = -self.state.square().sum(1)
        self.t += 1
        done = self.t >= 20
        if done.any():
            self.state[done] = torch.randn(int(done.sum()), OBS, generator=self.g)
            self.t[done] = 0
        return self.state.clone(), reward, done.float()


def mlp(out: int, std: float = 1.0) -> nn.Sequential:
    net = nn.Sequential(nn.Linear(OBS, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.Tanh(),
                        nn.Linear(HIDDEN, out))
    for m in net:
        if isinstance(m, nn.Linear):   # orthogonal init, as PPO implementations do
            nn.init.orthogonal_(m.weight, 2 ** 0.5)
            nn.init.zeros_(m.bias)
    nn.init.orthogonal_(net[-1].weight, std)
    return net


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.critic = mlp(1)
        self.actor = mlp(ACTIONS, 0.01)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def act(self, x: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x)


def ppo(steps: int, g: torch.Generator, rollout: int = 32, epochs: int = 2,
        minibatches: int = 4) -> None:
    env, agent = ToyEnv(ENVS, g), ActorCritic()
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    obs = torch.zeros(rollout, ENVS, OBS)
    actions = torch.zeros(rollout, ENVS, dtype=torch.long)
    logprobs, rewards, dones, values = (torch.zeros(rollout, ENVS) for _ in range(4))
    next_obs, next_done = env.state.clone(), torch.zeros(ENVS)
    batch = rollout * ENVS
    mb = batch // minibatches
    updates = max(1, -(-steps // (epochs * minibatches)))
    for _ in range(updates):
        for t in range(rollout):
            obs[t], dones[t] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.act(next_obs)
                values[t] = value.flatten()
            actions[t], logprobs[t] = action, logprob
            next_obs, rewards[t], next_done = env.step(action)
        with torch.no_grad():   # generalised advantage estimation, backwards in time
            next_value = agent.value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            last = 0
            for t in reversed(range(rollout)):
                if t == rollout - 1:
                    nonterminal, nextvalues = 1.0 - next_done, next_value
                else:
                    nonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + 0.99 * nextvalues * nonterminal - values[t]
                advantages[t] = last = delta + 0.99 * 0.95 * nonterminal * last
            returns = advantages + values
        b_obs, b_actions = obs.reshape(-1, OBS), actions.reshape(-1)
        b_logprobs, b_adv = logprobs.reshape(-1), advantages.reshape(-1)
        b_returns, b_values = returns.reshape(-1), values.reshape(-1)
        for _ in range(epochs):
            order = torch.randperm(batch, generator=g)
            for start in range(0, batch, mb):
                idx = order[start:start + mb]
                _, newlogprob, entropy, newvalue = agent.act(b_obs[idx], b_actions[idx])
                ratio = (newlogprob - b_logprobs[idx]).exp()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
                newvalue = newvalue.view(-1)
                clipped = b_values[idx] + (newvalue - b_values[idx]).clamp(-0.2, 0.2)
                v_loss = 0.5 * torch.max((newvalue - b_returns[idx]) ** 2,
                                         (clipped - b_returns[idx]) ** 2).mean()
                loss = pg_loss - 0.01 * entropy.mean() + 0.5 * v_loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()


def dqn(steps: int, g: torch.Generator, capacity: int = 512, batch: int = 64,
        warmup: int = 64) -> None:
    env = ToyEnv(ENVS, g)
    q = mlp(ACTIONS)
    target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), lr=1e-3)
    buf_obs, buf_next = torch.zeros(capacity, OBS), torch.zeros(capacity, OBS)
    buf_act = torch.zeros(capacity, dtype=torch.long)
    buf_rew, buf_done = torch.zeros(capacity), torch.zeros(capacity)
    obs, filled, pos, trained = env.state.clone(), 0, 0, 0
    while trained < steps:
        with torch.no_grad():   # epsilon-greedy
            greedy = q(obs).argmax(1)
        explore = torch.rand(ENVS, generator=g) < 0.1
        action = torch.where(explore, torch.randint(0, ACTIONS, (ENVS,), generator=g), greedy)
        next_obs, reward, done = env.step(action)
        at = (torch.arange(ENVS) + pos) % capacity
        buf_obs[at], buf_next[at], buf_act[at] = obs, next_obs, action
        buf_rew[at], buf_done[at] = reward, done
        pos, filled, obs = (pos + ENVS) % capacity, min(capacity, filled + ENVS), next_obs
        if filled < warmup:
            continue
        idx = torch.randint(0, filled, (batch,), generator=g)
        with torch.no_grad():
            best = target(buf_next[idx]).max(1).values
            td_target = buf_rew[idx] + 0.99 * best * (1 - buf_done[idx])
        old = q(buf_obs[idx]).gather(1, buf_act[idx].unsqueeze(1)).squeeze(1)
        loss = F.smooth_l1_loss(old, td_target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        trained += 1
        if trained % 2 == 0:   # Polyak update of the target, in place
            with torch.no_grad():
                for tp, p in zip(target.parameters(), q.parameters()):
                    tp.lerp_(p, 0.05)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=["ppo", "dqn"], required=True)
    p.add_argument("--steps", type=int, default=8, help="optimizer steps")
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    (ppo if args.case == "ppo" else dqn)(args.steps, g)


if __name__ == "__main__":
    main()
