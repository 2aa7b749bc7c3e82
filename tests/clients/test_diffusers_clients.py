"""Real clients: diffusers models built from config (tests/clients/train_diffusers.py) under
a DDPM / latent-diffusion loop. Every peak to the byte: the ledger against the allocator,
each prediction against what `measure` measured. Skipped when diffusers is missing.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from configs: never reach the hub

from tests.clients.harness import run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("diffusers")


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """Imported as the script imports them, before the first traced run: the submodules
    these load make a few small tensors at import (208 B), which the allocator pass of a
    run in this same process would not see again. In a fixture, not at the module's top:
    every pytest worker imports every test module to collect it (~3-5 s of CPU each for
    these)."""
    from diffusers import (  # noqa: F401
        AutoencoderKL,
        DDPMScheduler,
        DiTTransformer2DModel,
        UNet2DConditionModel,
        UNet2DModel,
    )


def _exact(run) -> None:
    assert run.ledger.peak_with_scratch() == run.allocator_peak, \
        (run.ledger.peak_with_scratch(), run.allocator_peak)
    # DDPMScheduler's `timesteps`, torch.from_numpy(...): numpy's 800 B, which the
    # allocator never sees (Note [Memory torch's allocator did not hand out])
    st = run.ledger.storages
    assert st.loc[st["external"], "bytes"].tolist() == [800]
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)


def test_vae_trained_through_encode_and_decode():
    """AutoencoderKL trains as `vae.encode(x)`, `vae.decode(z)`: its forward never runs.
    The model is the VAE all the same (Note [A model called through its methods] in
    trace/roots.py): `encoder.*` and `decoder.*` select its blocks (before: the encoder was
    taken for the model and `decoder.up_blocks.*` refused as another top-level module's).
    `offload:encoder` moves the batch, which the MSE also saves as its target: it goes
    with the loss node (engine.py `_release_partly_saved`; 6,144 B over before)."""
    run = run_client("train_diffusers.py", ["--model", "vae", "--steps", "3"],
                     ["offload:encoder", "checkpoint:decoder.up_blocks.*"])
    assert run.ledger.scopes["mod"].str.startswith("decoder.up_blocks.").any()
    _exact(run)


def test_unet_checkpointing_itself_with_its_down_blocks_offloaded():
    """UNet2DConditionModel (cross-attention) with `enable_gradient_checkpointing()`: each
    resnet's checkpoint saves the time embedding as an input, in every down, mid and up
    block. Offloading the down blocks leaves it to the mid and up blocks' saves, whose
    backward comes first: it goes there (512 B over before). Offloading the up blocks
    instead, the first down block's checkpoint re-runs its transformer block on the text
    states that block saved, which live on to the re-run's backward (768 B under before).
    Checkpointing a down block nests with the library's own checkpoint: refused by predict
    and measure alike."""
    run = run_client("train_diffusers.py", ["--model", "cond", "--grad-ckpt", "--steps", "3"],
                     ["offload:down_blocks.*", "offload:up_blocks.*", "checkpoint:down_blocks.*"])
    refused = run.policies.pop("checkpoint:down_blocks.*")
    assert refused.predicted is None and refused.measured is None
    assert refused.predict_refusal == refused.measure_refusal
    assert "the script already checkpoints down_blocks.0.resnets.0" in refused.predict_refusal
    # in the first down block's backward, named so though the text states its node unpacks
    # were saved last by up_blocks.1 (Note [The module of a backward op]): the GEGLU's
    # `hidden * gelu(gate)` gradient (2 x 64 x 64, 32,768 B), named by the module whose
    # call made its node; "down_blocks.0.attentions.0" before, the module that called the
    # checkpoint, whose inputs the region's first node unpacked to re-run it (Note [The
    # module that made a node], trace/node_makers.py)
    assert (run.summary.peak.op, run.summary.peak.module) == \
        ("mul.Tensor", "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0")
    _exact(run)


def test_dit_under_bf16_autocast():
    """DiT's output layer calls the first block's embedding again, which takes its linear's
    bf16 weight cast from autocast's cache and saves it too. Checkpointed, that block's
    re-run makes the cast again and its own node holds it to its backward (engine.py
    `_own_save_end`; 512 B under before)."""
    run = run_client("train_diffusers.py", ["--model", "dit", "--autocast", "bf16", "--batch",
                                            "8", "--steps", "3"],
                     ["checkpoint:transformer_blocks.*", "offload:transformer_blocks.*"])
    _exact(run)


def test_plan_searches_a_unets_down_and_up_blocks_together():
    """UNet2DModel's down blocks (DownBlock2D, AttnDownBlock2D) and up blocks (AttnUpBlock2D,
    UpBlock2D) are two stacks of mixed classes, one named segment apart. `plan` took the up
    blocks alone (they save the most): at 80 % of the baseline it said no candidate fits,
    the lowest 3.5 MiB (the up blocks offloaded), though both stacks offloaded fit
    (Note [Stacks beside the blocks], replay/plan.py). The skip connections join the
    four blocks into one unit: the search gives them one option."""
    from memledger.replay.plan import plan

    both = "offload:up_blocks.*+offload:down_blocks.*"
    run = run_client("train_diffusers.py", ["--model", "unet"], [both])
    _exact(run)
    rep = plan(run.ledger, int(run.ledger_peak * 0.8), front_points=0)
    assert rep.blocks == ["up_blocks.0", "up_blocks.1", "down_blocks.0", "down_blocks.1"]
    assert (rep.fits, rep.policy) == (True, both)
    assert rep.predicted_peak_bytes == run.policies[both].measured == 3_389_528
