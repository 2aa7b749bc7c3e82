"""PaLM-rlhf-pytorch (lucidrains) as its README trains it, tiny and on random tokens,
nothing downloaded:

- `lm`: a `PaLM` trained as a language model, `palm(seq, return_loss=True)`, Adam.
- `ppo`: `RLHFTrainer(palm=..., reward_model=..., prompt_token_ids=...).train(...)`, the
  library's own PPO loop (an `ActorCritic` with actor and critic LoRA scopes, sampling
  episodes by generation, then `learn`: AdoptAtan2 for the actor and for the critic, an
  HL-Gauss value loss, through accelerate), tiny: `--episodes` timesteps, one update.
- `reward`: a `RewardModel` around a (non-causal) PaLM, LoRA-finetuned: the reward LoRA
  scope (`palm.finetune_modules.reward.*`, called inside each `palm.layers.N` block) and
  the binned head train, `reward_model(seq, prompt_mask=..., labels=...)`, Adam over
  `reward_model.finetune_parameters()` as the library lists them.

    python tests/clients/train_palm_rlhf.py --mode reward --steps 3
    memledger trace tests/clients/train_palm_rlhf.py --steps 2 -o palm.ledger -- --mode lm
"""

import argparse

import torch

from palm_rlhf_pytorch import PaLM, RewardModel, RLHFTrainer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="lm", choices=["lm", "reward", "ppo"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=16)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--bins", type=int, default=5)
    p.add_argument("--episodes", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    palm = PaLM(num_tokens=args.tokens, dim=args.dim, depth=args.depth, dim_head=8, heads=2,
                ff_mult=2, causal=args.mode == "lm")
    if args.mode == "ppo":
        reward_model = RewardModel(palm, num_binned_output=args.bins, lora_r=4)
        prompts = torch.randint(1, args.tokens, (8, args.seq_len // 2),
                                generator=torch.Generator().manual_seed(1))
        trainer = RLHFTrainer(palm=palm, reward_model=reward_model, prompt_token_ids=prompts,
                              actor_lora_r=4, critic_lora_r=4, minibatch_size=args.batch)
        trainer.train(num_episodes=1, max_timesteps=args.episodes,
                      update_timesteps=args.episodes, max_seq_len=args.seq_len)
        return
    if args.mode == "lm":
        model, params = palm, palm.parameters()
    else:
        model = RewardModel(palm, num_binned_output=args.bins, lora_r=4, dropout=0.0)
        params = model.finetune_parameters()
    opt = torch.optim.Adam(params, lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    for step in range(args.steps):
        seq = torch.randint(1, args.tokens, (args.batch, args.seq_len), generator=gen)
        if args.mode == "lm":
            loss = model(seq, return_loss=True)
        else:
            prompt_mask = torch.arange(args.seq_len) < args.seq_len // 2
            prompt_mask = prompt_mask.expand(args.batch, -1)
            labels = torch.randint(0, args.bins, (args.batch,), generator=gen)
            loss = model(seq, prompt_mask=prompt_mask, labels=labels)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
