"""transformers' architectures, each shrunk from its default config
(tests/clients/train_hf_arch.py): one of each family whose mechanics the other clients do
not have, every policy predicted = measured, and each policy lowering the peak (a row where
no policy moves the peak would pass whatever the replay did). benchmarks/hf_archs.py runs
every causal-LM architecture transformers ships (docs/accuracy.md, "Every transformers
architecture")."""

from __future__ import annotations

import pytest

from tests.clients.harness import fake_client_gaps, gaps_of, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("transformers")


def _known(arch: str) -> None:
    """Skip an architecture this transformers does not ship (dev installs >= 5.0)."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    if arch not in CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no {arch!r}")


ALL = ("checkpoint", "selective", "offload")


@pytest.mark.parametrize("arch, loop, kinds", [
    ("deepseek_v3", [], ALL),   # latent attention, shared + routed experts, a dense 1st layer
    ("qwen3_next", [], ALL),    # gated delta-net linear attention beside full attention
    ("bamba", [], ALL),         # Mamba-2 mixers and attention in one stack
    ("bloom", [], ALL),         # ALiBi biases
    ("gpt_oss", ["--amp"], ALL),    # attention sinks, MoE, under bf16 autocast
    # (peft 0.22 scales the router's LoRA update in place: selective refused alike there,
    # its advice priced; `_refused_alike`)
    ("mixtral", ["--lora"], ALL),   # peft LoRA on a mixture of experts (3-D expert weights)
    # Llama 4's MoE adds the routed experts into its shared expert's `down_proj` output in
    # place, past the layer's early stop: predict refused selective, which measure ran
    ("llama4_text", [], ALL),
    # Mamba-2 mixers cast `D` with their own `.to(dtype)` under autocast, read by a `mul`:
    # not autocast's cached cast, which replay held to the re-run's end (+8 B)
    ("nemotron_h", ["--amp"], ALL),
    # math attention (a float mask under autocast) adds the mask in place untraced, out of
    # place traced: the re-run's peak sat on that add, +391,164 B under checkpoint
    ("doge", ["--amp"], ALL),
    # each cycle calls the layers under no_grad first (the weights' casts made there),
    # then with gradients: checkpointed, nothing held the casts past the autocast exit
    # (selective is refused alike: a call's ops differ from its re-run's)
    ("hrm_text", ["--amp"], ("checkpoint", "offload")),
    # another head: an encoder-decoder classifying from its eos token, multi-label (BCE
    # with logits, whose backward Note [A derivative formula in place but for the mode]
    # folds)
    ("bart", ["--task", "seq-cls", "--amp"], ALL),
    # an image classifier pooling with nn.MultiheadAttention (batch-first, a probe as the
    # query): its key/value projection's bias is added in place untraced (Note [A Linear's
    # bias, added in place but for the mode]); unfolded, the scratch of the `add`s inside
    # `repeat` was matched one `add` off, +8 B at the peak
    ("siglip", ["--task", "image-cls", "--batch-size", "32"], ALL),
    # CTC with the loss averaged over target lengths: F.ctc_loss clamps the integer lengths
    # under a mode, a float copy of them untraced (Note [CTC's target lengths]), +48 B
    ("unispeech", ["--task", "ctc"], ALL),
    # a detector: Hungarian matching (scipy), box losses, denoising queries; its anchors
    # are cached process-wide (the harness clears transformers' caches between passes)
    ("rt_detr", ["--task", "object-detection"], ALL),
    # a vision-language model: an image as flattened patches with their grid, its features
    # scattered into the caption's embeddings (masked_scatter), multimodal rotary positions
    ("qwen2_vl", ["--task", "image-text"], ALL),
])
def test_architecture(arch: str, loop: list[str], kinds: tuple[str, ...]) -> None:
    from tests.clients.train_hf_arch import blocks_glob, build, task_of
    _known(arch)
    glob = blocks_glob(build(arch, "meta", "--lora" in loop, task_of(loop)))
    policies = [f"{kind}:{glob}" for kind in kinds]
    refused = _refused_alike(arch, glob) if "selective" in kinds else {}
    if refused:   # the line's advice, the default save list without `mm`, is priced
        policies.append(f"selective:{glob}:save=bmm,addmm,baddbmm")
    run = run_client("train_hf_arch.py", ["--arch", arch, "--steps", "3", *loop], policies)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        if text in refused:
            assert p.predicted is None and p.measured is None, (text, p)
            assert p.predict_refusal == p.measure_refusal, (text, p)
            assert refused[text] in p.predict_refusal, (text, p)
            continue
        assert p.predicted is not None and p.predicted == p.measured, (text, p)
        assert p.measured < run.allocator_peak, (text, p)


def _refused_alike(arch: str, glob: str) -> dict[str, str]:
    """A row's policies that predict and measure refuse in one line, with words that line
    holds. peft 0.22 scales a LoRA update in place (`Linear.get_delta_weight`:
    `output_tensor.mul_(scaling)`; 0.21 multiplied out of place), and its `ParamWrapper`
    computes that update in every forward for Mixtral's router, a bare weight
    (`mlp.gate.weight`): the `mm` of `B @ A`, which selective keeps by default, is changed
    after it is made, and torch's selective checkpoint refuses the re-run. predict and
    measure refuse it alike (Note [Written in place in forward], trace/collector.py; in
    plain torch: tests/clients/test_param_delta.py); under 0.21 it is priced."""
    if arch != "mixtral":
        return {}
    import peft
    from packaging.version import Version
    if Version(peft.__version__) < Version("0.22"):
        return {}
    layer = glob.removesuffix("*") + "1"   # backward re-runs the last layer first
    return {f"selective:{glob}": f"keeps mm's output in {layer} that is changed in place "
                                 "afterwards"}


def test_a_recurrent_state_kept_on_its_module_holds_only_its_graph():
    """RecurrentGemma's RG-LRU keeps its scan's last state on itself
    (`self.recurrent_states`); a checkpointed layer's re-run keeps its copy there, whose
    graph holds what the scan and its gates saved, not the layer's other branch (the GELU
    of `linear_y`). The stash record names the saves the graph holds (`reach`, Note
    [Tensors a call keeps on its module]). Checkpoint was 393,184 B over, then 32 B under
    (the Python numbers the scan's nodes keep, saved with no hook); selective 6,176 B
    under, the walk's rule 268,288 B under (the `linear_x` and conv outputs that SAC's
    cache handed the re-run, which the copy's graph holds too). Every policy exact now."""
    from tests.clients.train_hf_arch import blocks_glob, build, first_blocks
    _known("recurrent_gemma")
    glob = blocks_glob(build("recurrent_gemma", "meta"))
    one, two = first_blocks(glob)
    mixed = f"checkpoint:{one}+offload:{two}"
    policies = [f"checkpoint:{glob}", f"selective:{glob}", f"offload:{glob}", mixed]
    run = run_client("train_hf_arch.py", ["--arch", "recurrent_gemma", "--steps", "3"],
                     policies)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)
        assert p.measured < run.allocator_peak, (text, p)
    led = run.ledger
    reach = [r for r in led.extra["stash"] if "reach" in r]
    assert len(reach) == 4 and all(r["graph"] and r["reach"] for r in reach)


def test_a_policy_on_modules_that_never_ran_is_refused_alike():
    """GOT-OCR2 given text alone never runs its vision tower (Note [Modules that never
    ran], replay/policies.py): predict said the script calls the layers' `.forward()`
    directly, measure measured the baseline. Both now refuse it in the same words."""
    _known("got_ocr2")
    policy = "checkpoint:model.vision_tower.layers.*"
    run = run_client("train_hf_arch.py", ["--arch", "got_ocr2", "--steps", "2"], [policy],
                     steps=1)
    p = run.policies[policy]
    assert p.predicted is None and p.measured is None
    assert p.predict_refusal == p.measure_refusal
    assert "model.vision_tower.layers.0, model.vision_tower.layers.1, which never ran" \
        in p.predict_refusal


def test_fake_split_sizes_read_from_a_router():
    """JetMoE's router reads its experts' sizes with `.tolist()` and splits the tokens by
    them: a fake run's stand-in zeros made `split_with_sizes` refuse, and the run crashed.
    They are split evenly now (Rule 18, trace/fake.py), and the fake ledger agrees with
    the real one in peak, categories at the peak and every policy's prediction."""
    from tests.clients.train_hf_arch import blocks_glob, build
    _known("jetmoe")
    glob = blocks_glob(build("jetmoe", "meta"))
    policies = [f"checkpoint:{glob}", f"selective:{glob}", f"offload:{glob}"]
    assert fake_client_gaps("train_hf_arch.py", ["--arch", "jetmoe", "--steps", "2"],
                            policies) == {}


def test_an_input_two_checkpointed_layers_saved_is_held_by_each_rerun():
    """BART classifying under its own checkpoint (`--grad-ckpt`) and bf16 autocast: each
    decoder layer's checkpoint saves its inputs, the encoder's output among them, through
    offload's hooks. The copy is read back once, by the first re-run (layer 1's), and
    handed to layer 0's, which holds it to its end, where the peak is: the replay let it go
    with the first re-run, `offload:model.decoder.layers.*` 131,072 B under measured."""
    _known("bart")
    run = run_client("train_hf_arch.py", ["--arch", "bart", "--task", "seq-cls", "--grad-ckpt",
                                          "--amp", "--steps", "3"],
                     ["offload:model.decoder.layers.*", "offload:model.encoder.layers.*"])
    assert gaps_of(run) == {}
    assert all(p.measured for p in run.policies.values())


def test_a_stage_input_its_relu_keeps_too_is_read_back_into_a_copy_the_rerun_holds():
    """SwiftFormer classifying images under its own checkpoint (each stage checkpoints its
    forward) and bf16 autocast: a stage's input, which the ReLU before it saves too, is
    saved by the stage's checkpoint through offload's hooks and read back when the re-run
    starts, while the original stays with the ReLU. The re-run works on the copy and its
    first convolution's save holds it until that convolution's backward, where the peak
    is: the replay let the copy go as the unpacking node returned, `offload` of a stage
    49,152 B under measured. Offloading the stage raises the peak: predicted as measured."""
    _known("swiftformer")
    stage, embeddings = "swiftformer.encoder.network.0", "swiftformer.encoder.network.[135]"
    run = run_client("train_hf_arch.py", ["--arch", "swiftformer", "--task", "image-cls",
                                          "--grad-ckpt", "--amp", "--steps", "3"],
                     [f"offload:{stage}", f"offload:{embeddings}"])
    assert gaps_of(run) == {}
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.policies[f"offload:{stage}"].measured > run.allocator_peak


def test_a_layer_layerdrop_skipped_in_the_first_step_is_measured_as_predicted():
    """SEW classifying audio: its encoder skips each layer with probability 0.1 in training
    (LayerDrop), and with this seed skips layer 1 in the first step and runs it in the
    second. predict took a policy on it (the ledger's steps read its parameters) and
    measure refused it as a module that never ran, checking at the first optimizer step;
    measure now checks when the policy comes off, over every step it ran."""
    _known("sew")
    policies = ["offload:sew.encoder.layers.1",
                "checkpoint:sew.encoder.layers.0+offload:sew.encoder.layers.1"]
    run = run_client("train_hf_arch.py", ["--arch", "sew", "--task", "audio-cls", "--steps",
                                          "3"], policies)
    assert gaps_of(run) == {}
    assert all(p.measured for p in run.policies.values())


def test_selective_around_a_frozen_stage_holds_its_cache_until_the_stage_returns():
    """peft LoRA on a ResNet trains its head alone: no backward goes through the frozen
    stages, so selective's cache (every convolution output of a stage) is never taken by a
    re-run and goes with the checkpoint's frame as the stage returns. The replay let each
    output go as the forward did: 1,261,440 B under measured."""
    from tests.clients.train_hf_arch import blocks_glob, build
    _known("resnet")
    glob = blocks_glob(build("resnet", "meta", True, "image-cls"))
    run = run_client("train_hf_arch.py", ["--arch", "resnet", "--task", "image-cls", "--lora",
                                          "--steps", "3"], [f"selective:{glob}"])
    assert gaps_of(run) == {}
    p = run.policies[f"selective:{glob}"]
    assert p.measured > run.allocator_peak   # the cache raises the peak: predicted so


def test_math_attentions_mask_add_is_folded_in_the_scripts_own_rerun_too():
    """w2v-BERT classifying audio under its own checkpoint and bf16 autocast: the layers'
    math attention adds a float mask into the scores in place untraced, out of place under
    the mode (Note [The attention mask, added in place but for the mode]). The re-run of a
    checkpointed layer runs that `add` in backward, where the forward's folds were not
    looked for: the ledger with scratch read 391,164 B over the allocator, the peak in the
    re-run."""
    _known("wav2vec2-bert")
    run = run_client("train_hf_arch.py", ["--arch", "wav2vec2-bert", "--task", "audio-cls",
                                          "--grad-ckpt", "--amp", "--steps", "3"],
                     ["offload:wav2vec2_bert.encoder.layers.*"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert gaps_of(run) == {}


def test_a_mask_each_layer_takes_is_read_back_for_its_layers_rerun_alone():
    """SEW-D classifying audio under its own checkpoint and bf16 autocast: every layer takes
    the attention mask as its second input, which each layer's checkpoint saves. Its
    re-run reads the mask back at the fork's own event (after the hidden states), which
    the replay took for no re-run's, and held layer 0's copy to the frame's end: `offload`
    of the layers 768 B over measured."""
    _known("sew-d")
    layers = "sew_d.encoder.encoder.layer"
    run = run_client("train_hf_arch.py", ["--arch", "sew-d", "--task", "audio-cls",
                                          "--grad-ckpt", "--amp", "--steps", "3"],
                     [f"offload:{layers}.*", f"offload:{layers}.0"])
    assert gaps_of(run) == {}
    assert all(p.measured < run.allocator_peak for p in run.policies.values())


def test_selective_on_frozen_layers_that_write_in_place_is_predicted_as_measured():
    """peft LoRA on Parakeet's CTC model: its subsampling convolutions are frozen and take
    the features (no gradient), so no backward goes through them, and their activation
    writes in place. predict refused selective there (an output changed in place that
    torch's selective checkpoint cannot hand back), which measure ran: a call that saves
    nothing is never re-run."""
    from tests.clients.train_hf_arch import blocks_glob, build
    _known("parakeet_ctc")
    glob = blocks_glob(build("parakeet_ctc", "meta", True, "ctc"))
    run = run_client("train_hf_arch.py", ["--arch", "parakeet_ctc", "--task", "ctc", "--lora",
                                          "--steps", "3"], [f"selective:{glob}"])
    assert gaps_of(run) == {}
    assert run.policies[f"selective:{glob}"].predicted is not None


def test_selective_on_layers_no_backward_goes_through_is_not_refused_for_their_buffers():
    """peft LoRA on I-BERT (multiple choice): its layers' projections are `QuantLinear`s,
    which LoRA's all-linear does not take, so no backward goes through the layers. Their
    activation-range observers remake a buffer from the one before on every call, on
    another path the first time, and predict refused selective as a re-run that would run
    other ops; a call that saved nothing is never re-run, and measure ran it."""
    from tests.clients.train_hf_arch import blocks_glob, build
    _known("ibert")
    glob = blocks_glob(build("ibert", "meta", True, "multiple-choice"))
    run = run_client("train_hf_arch.py", ["--arch", "ibert", "--task", "multiple-choice",
                                          "--lora", "--steps", "3"], [f"selective:{glob}"])
    assert gaps_of(run) == {}
    assert run.policies[f"selective:{glob}"].predicted is not None


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "idefics3"])
def test_fake_vision_language_models_agree_with_real(arch):
    """Qwen2-VL's tower turns each image's patch grid into sequence lengths with
    `repeat_interleave` by a tensor, and its rotary positions end in `torch.tensor` of a
    list of 0-d tensors; Idefics 3 keeps the images that are not all-zero padding by a mask
    made from their pixels; Qwen2.5-VL bounds its windows with `unique_consecutive`, an op
    of three outputs. Each stopped a fake run (exit 2, exit 3); the grid's values are
    known, so the first runs for real and the second reads them (Rules 3 and 19), and the
    mask keeps every image, its upper bound. The fake ledger now agrees with the real one
    in peak, categories at the peak and every policy's prediction."""
    from tests.clients.train_hf_arch import blocks_glob, build
    _known(arch)
    glob = blocks_glob(build(arch, "meta", task="image-text"))
    policies = [f"checkpoint:{glob}", f"selective:{glob}", f"offload:{glob}"]
    assert fake_client_gaps("train_hf_arch.py", ["--arch", arch, "--task", "image-text",
                                                 "--steps", "2"], policies) == {}


def test_fake_builds_a_model_whose_init_writes_a_view_without_grad():
    """SpeechT5's `nn.Embedding(..., padding_idx)` zeroes its padding row under `no_grad`
    (a view of the weight, written in place). Rule 17 noted the write and read the view's
    `grad_fn` at the next op, which autograd refuses for a view made without grad whose
    base was written: every fake run of SpeechT5 (and of speech-encoder-decoder) stopped
    in the model's constructor. A write under `no_grad` rebuilds no node and is not noted
    now."""
    from tests.clients.train_hf_arch import build
    _known("speecht5")
    import memledger
    with memledger.trace(fake=True):
        model = build("speecht5", "cpu", task="speech-seq2seq")
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.mark.slow   # three ledger passes of VideoMAE, ~25 s
def test_fake_videomae_pretraining_masks_the_real_runs_tubes():
    """VideoMAE's pretraining masks half of each clip's tubes, `torch.rand(n, tubes,
    generator=gen).argsort(1) < tubes // 2`: a float draw whose values the fake run
    dropped, so `x[~mask]` kept every tube (its upper bound, 4 stand-ins said) and the fake
    peak read 18,786,092 B against the real 13,815,596 (+4,970,496, 34 %). The script's
    generator is in step with the real run's, so the draw keeps its values now (Rule 36 of
    Note [Fake runs]): fake = real, peak and every category, nothing said."""
    from memledger.ledger.fake_info import fake_info
    from tests.clients.harness import ledger_pass

    _known("videomae")
    argv = ["--arch", "videomae", "--task", "pretraining", "--steps", "2"]
    assert fake_client_gaps("train_hf_arch.py", argv, []) == {}
    fake = ledger_pass("train_hf_arch.py", argv, fake_device="cpu")
    assert fake.peak().bytes == 13_815_596
    assert fake_info(fake).standins == []
