"""transformers' architectures, each shrunk from its default config
(tests/clients/train_hf_arch.py): one of each family whose mechanics the other clients do
not have, every policy predicted = measured, and each policy lowering the peak (a row where
no policy moves the peak would pass whatever the replay did). benchmarks/hf_archs.py runs
every causal-LM architecture transformers ships (docs/accuracy.md, "Every transformers
architecture")."""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client
from tests.clients.train_hf_arch import blocks_glob, build

pytestmark = pytest.mark.clients

pytest.importorskip("transformers")


@pytest.mark.parametrize("arch, loop", [
    ("deepseek_v3", []),       # latent attention, shared + routed experts, a dense first layer
    ("qwen3_next", []),        # gated delta-net linear attention beside full attention
    ("bamba", []),             # Mamba-2 mixers and attention in one stack
    ("bloom", []),             # ALiBi biases
    ("gpt_oss", ["--amp"]),    # attention sinks, MoE, under bf16 autocast
    ("mixtral", ["--lora"]),   # peft LoRA on a mixture of experts (3-D expert weights)
    # its MoE adds the routed experts into the shared expert's `down_proj` output in place,
    # past the layer's early stop: predict refused selective, which measure ran
    ("llama4_text", []),
])
def test_architecture(arch: str, loop: list[str]) -> None:
    glob = blocks_glob(build(arch, "meta", "--lora" in loop))
    policies = [f"checkpoint:{glob}", f"selective:{glob}", f"offload:{glob}"]
    run = run_client("train_hf_arch.py", ["--arch", arch, "--steps", "3", *loop], policies)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)
        assert p.measured < run.allocator_peak, (text, p)
