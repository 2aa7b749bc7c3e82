"""The tiny GPT training step that `daily.py`'s API table and `per_step.py` time (the
defaults of examples/train_gpt.py, one intra-op thread, seeded)."""

from __future__ import annotations


def tiny_gpt_step(batch_size: int = 8, threads: int | None = 1, **sizes):
    """(step, model, optimizer): `step()` runs one training step of a fresh tiny GPT
    (`sizes`: GPTConfig's, the example's defaults otherwise; `threads`: torch's intra-op
    threads, None to leave them). The tree whose `tests/conftest.py` is first on `sys.path`
    gives the example."""
    import torch
    import torch.nn.functional as F

    from tests.conftest import load_example

    if threads is not None:
        torch.set_num_threads(threads)
    ex = load_example("gpt")
    torch.manual_seed(0)
    cfg = ex.GPTConfig(**sizes)
    model = ex.GPT(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(cfg.vocab_size, (20_000,), generator=gen)

    def step() -> None:
        x, y = ex.get_batch(data, batch_size, cfg.block_size, gen)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step, model, opt
