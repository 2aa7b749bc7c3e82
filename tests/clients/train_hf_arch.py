"""Train any of transformers' causal-LM architectures, shrunk from its default config (no
download), for differential tests of the replay over code nobody here wrote: MoE routers,
hybrid attention/state-space stacks, multi-head latent attention, sliding windows, and
whatever the next release adds. `benchmarks/hf_archs.py` runs every architecture under
each policy; tests/clients/test_hf_archs.py pins one of several families and the ones
that showed a gap.

    python tests/clients/train_hf_arch.py --arch mixtral --steps 3
    python tests/clients/train_hf_arch.py --arch qwen3_next --amp --accum 2
    python tests/clients/train_hf_arch.py --arch olmoe --show      # the blocks' glob
    python tests/clients/train_hf_arch.py --arch mixtral --lora    # peft LoRA, all-linear
    python tests/clients/train_hf_arch.py --arch phi --grad-ckpt   # the model's own checkpoint
    python tests/clients/train_hf_arch.py --arch bert --task seq-cls    # another head

`--task` picks the head and its loss, as transformers computes it from `labels`:
causal-lm (shifted cross entropy), masked-lm (cross entropy on 15 % of the tokens),
seq-cls (multi-label: BCE with logits over 5 labels), token-cls (cross entropy per token),
seq2seq (an encoder-decoder's cross entropy on a target half the length), image-cls
(cross entropy over 5 classes of 64-pixel images), audio-cls (5 classes of half a second of
audio, or the features its model takes), semantic-seg (a class for every pixel of a 64-pixel
image), object-detection (1-3 boxes an image: Hungarian matching, box and GIoU losses; a
DETR's timm ResNet is transformers' own), ctc (a 4-8 character transcript of half a second
of audio), audio-xvector (a speaker embedding's additive-margin softmax over 5 speakers),
masked-image (SimMIM: half the patches masked, their pixels reconstructed with an L1 loss),
qa (an answer's start and end token), multiple-choice (3 answers a question), universal-seg
(Mask2Former and kin: 2 masks an image, a class each; Hungarian matching, point-sampled
mask losses), video-cls (4-frame clips), audio-frames (a class for every audio frame),
contrastive (CLIP and kin: image-caption pairs, the model's contrastive loss, or CLIP's
where it computes none), speech-seq2seq (Whisper and kin: a 16-token transcript of half a
second of audio, or the features its model takes, cross entropy from the decoder; an
audio LM's placeholders for the clip, then the transcript), depth
(a depth map for every image; the script's L1 loss, the prediction resized bilinearly to
the target, as transformers trains no depth model itself), image-text (a vision-language
model: an image's placeholder tokens, as many as its features, then a caption; causal LM
loss on the caption).

The shrink is generic: every size field a config has (hidden size, layers, heads, experts,
latent-attention ranks, state-space heads, a multimodal model's towers, ...) is set small,
per-layer lists are cut to the layer count, special token ids are kept inside the small
vocabulary. An architecture the shrink cannot build exits with code 3 and one line saying
why.
"""

import argparse
import inspect
import os
import re
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: nothing to download

import numpy as np
import torch
import transformers

transformers.logging.set_verbosity_error()

LAYERS, V, SEQ = 2, 256, 64
# Size fields, under every name the configs use; only those a config has are set.
SMALL = dict(
    hidden_size=64, n_embd=64, d_model=64, intermediate_size=128, ffn_dim=128,
    num_hidden_layers=LAYERS, num_layers=LAYERS, n_layer=LAYERS, decoder_layers=LAYERS,
    encoder_layers=LAYERS, num_attention_heads=4, n_head=4, decoder_attention_heads=4,
    encoder_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=V,
    max_position_embeddings=128, n_positions=128, decoder_ffn_dim=128, encoder_ffn_dim=128,
    # mixtures of experts
    moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
    num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
    first_k_dense_replace=1, n_group=1, topk_group=1,
    # multi-head latent attention (DeepSeek)
    kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
    rotary_dim=8, sliding_window=8, use_cache=False,
    # the head and MLP sizes some families name their own way
    linear_key_head_dim=16, linear_value_head_dim=16, linear_head_dim=16, swa_head_dim=16,
    dim_head=16, dim_ff=128, dff=128, first_dense_intermediate_size=128,
    shared_intermediate_size=32, o_lora_rank=16, index_head_dim=16, index_topk=16,
    index_num_heads=2,
    unpadded_vocab_size=V, linear_num_key_heads=2, linear_num_value_heads=4,
    vocab_size_per_layer_input=V, hidden_size_per_layer_input=16, global_head_dim=16,
    # state-space mixers (Mamba-2 in hybrids)
    mamba_n_heads=4, mamba_num_heads=4, mamba_d_state=16, ssm_state_size=16, mamba_d_ssm=64,
    mamba_head_dim=16, mamba_chunk_size=16, chunk_size=16, n_groups=1,
    moe_shared_expert_intermediate_size=32,
    pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1,
)
# An image model's sizes (--task image-cls only: a multimodal causal LM's vision tower keeps
# the shrink it has): 64-pixel images, one block a stage, widths a quarter, at most 2 heads.
IMAGE = 64
FRAMES = 4   # --task video-cls: frames a clip
VISION = dict(image_size=IMAGE, embedding_size=16, stem_out_channels=16, depth_multiplier=0.25,
              num_groups=8, window_size=2,
              width_coefficient=0.5, depth_coefficient=1.0, hidden_dim=640,   # EfficientNet's
              num_queries=8,   # a detector's object queries
              reassemble_hidden_size=64,   # a DPT neck reading a 64-wide backbone
              num_frames=FRAMES, frames_per_clip=FRAMES, crop_size=IMAGE,   # a video's
              decoder_hidden_size=64, decoder_intermediate_size=128,   # a masked
              decoder_num_hidden_layers=LAYERS, decoder_num_attention_heads=4)   # autoencoder's
# An audio model's (--task audio-cls only): half a second of 16 kHz audio through the
# convolutional feature encoder, 32 channels a layer; spectrogram and filter-bank inputs
# 64 frames long.
SAMPLES = 8000
AUDIO = dict(classifier_proj_size=32, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
             conv_pos_kernel_size=5, xvector_output_dim=32, output_hidden_size=64,
             codevector_dim=32, proj_codevector_dim=32, num_codevectors_per_group=16,
             max_length=64, num_mel_bins=32, max_source_positions=32,
             conv_depthwise_kernel_size=7)
AUDIO_LISTS = {"conv_dim": 32, "tdnn_dim": 32}   # per-layer channels: the width each takes
DEPTH_LISTS = {"depths", "num_block_repeats", "n_attn_blocks", "stage_num_blocks"}
WIDTH_LISTS = {"hidden_sizes", "embed_dims", "embed_dim", "neck_hidden_sizes",
               "base_attn_unit_dims", "stage_in_channels",
               "stage_mid_channels", "stage_out_channels", "stem_channels"}
HEAD_LISTS = {"num_heads", "num_attention_heads"}
MAX_PARAMS = 20_000_000
LABELS = 5
# --task -> the Auto class of its head (TASKS: the transformers mapping that lists its types)
TASKS = {"causal-lm": "CausalLM", "masked-lm": "MaskedLM", "seq-cls": "SequenceClassification",
         "token-cls": "TokenClassification", "seq2seq": "Seq2SeqLM",
         "image-cls": "ImageClassification", "audio-cls": "AudioClassification",
         "semantic-seg": "SemanticSegmentation", "object-detection": "ObjectDetection",
         "ctc": "CTC", "audio-xvector": "AudioXVector", "masked-image": "MaskedImageModeling",
         "qa": "QuestionAnswering", "multiple-choice": "MultipleChoice",
         "universal-seg": "UniversalSegmentation", "video-cls": "VideoClassification",
         "audio-frames": "AudioFrameClassification",
         "contrastive": "ZeroShotImageClassification", "speech-seq2seq": "SpeechSeq2Seq",
         "depth": "DepthEstimation", "image-text": "ImageTextToText",
         "pretraining": "PreTraining"}
VISION_TASKS = {"image-cls", "semantic-seg", "object-detection", "masked-image",
                "universal-seg", "video-cls", "contrastive", "depth"}
CAPTION = 16   # --task contrastive: tokens a caption
IMAGE_TOKEN = V - 1   # --task image-text: the placeholder an image's features replace
IMAGE_TOKEN_FIELDS = ("image_token_id", "image_token_index")
AUDIO_TOKEN = V - 2   # --task speech-seq2seq, an audio LM: the placeholder a clip's replace
# --task image-text: a vision-language model's image tower at 64 pixels, its features
# projected to the text's width, Gemma 3's pooled to 4 tokens
IMAGE_TEXT = dict(image_size=IMAGE, out_hidden_size=64, projection_dim=64, mm_tokens_per_image=4,
                  embed_dim=64, num_heads=4)   # Qwen2-VL's tower: width, heads
GRID = 4   # --task image-text: patches a side of a Qwen-VL-style image (patches, not pixels)
CHOICES = 3   # --task multiple-choice: answers per question
AUDIO_TASKS = {"audio-cls", "ctc", "audio-xvector", "audio-frames", "speech-seq2seq"}
TRANSCRIPT = 16   # --task speech-seq2seq: tokens a transcript
EXIT_CANNOT_BUILD = 3


def config(arch: str, task: str = "causal-lm"):
    cfg = _shrunk(transformers.AutoConfig.for_model(arch).__class__, _shrink_as(arch, task))
    if task == "seq-cls":
        cfg.num_labels, cfg.problem_type = LABELS, "multi_label_classification"
    elif task == "token-cls" or task in VISION_TASKS | AUDIO_TASKS - {
            "ctc", "masked-image", "speech-seq2seq", "depth"}:
        cfg.num_labels = LABELS
        heads = _head_classes(task).get(arch)
        if isinstance(heads, tuple) and not cfg.architectures:   # DeiT's two: the plain one
            cfg.architectures = [heads[0]]
    if task == "speech-seq2seq" and _has(cfg, "audio_token_id"):   # an audio LM's
        cfg.audio_token_id = AUDIO_TOKEN   # placeholder inside the small vocabulary
    if task in ("seq2seq", "speech-seq2seq"):   # T5's default lacks a start token, a
        for name in ("decoder_start_token_id", "pad_token_id"):   # composite's both
            if getattr(cfg, name, None) is None:
                setattr(cfg, name, SMALL[name])
    if task == "image-text":   # the image placeholder inside the small vocabulary
        for name in IMAGE_TOKEN_FIELDS:
            if _has(cfg, name):   # BLIP-2's, None by default, turns its queries' on
                setattr(cfg, name, IMAGE_TOKEN)
        text = cfg.get_text_config()   # multimodal rotary sections: the code's default
        rope = getattr(text, "rope_parameters", None)   # (16/24/24 of a 128 head) for ours
        if "mrope_section" in getattr(type(text), "ignore_keys_at_rope_validation", ()) \
                and isinstance(rope, dict) and "mrope_section" not in rope:
            rope["mrope_section"] = [2, 3, 3]   # halves of SMALL's 16-wide head: 8
        if _has(cfg, "image_grid_pinpoints"):   # LLaVA-NeXT's any-res tiles: one 64-pixel
            cfg.image_grid_pinpoints = [[IMAGE, IMAGE]]   # tile beside the whole image
        vision = getattr(cfg, "vision_config", None)   # Qwen3-VL's DeepStack: features of
        if getattr(vision, "deepstack_visual_indexes", None):   # tower layers 0, 1 into
            vision.deepstack_visual_indexes = [0, 1]   # text layers 0, 1 (not 8, 16, 24)
    if task == "contrastive" and hasattr(cfg, "qformer_config"):   # BLIP-2's retrieval:
        cfg.qformer_config.use_qformer_text_input = True   # its Q-Former reads the captions
    return cfg


def _shrink_as(arch: str, task: str) -> str:
    """The task whose shrink a pretraining head takes: an audio model's (a convolutional
    feature encoder), an image model's, or the text one."""
    if task != "pretraining":
        return task
    base = vars(transformers.AutoConfig.for_model(arch))
    return "audio-cls" if "conv_dim" in base else "image-cls" if "num_channels" in base \
        and "vocab_size" not in base else task


def task_of(argv: list[str]) -> str:
    """The `--task` of the script's arguments."""
    return argv[argv.index("--task") + 1] if "--task" in argv else "causal-lm"


def auto_class(task: str):
    return getattr(transformers, "AutoModelFor" + TASKS[task])


def archs(task: str) -> list[str]:
    """Every model type transformers ships with the task's head."""
    return list(_head_classes(task))


def _head_classes(task: str) -> dict:
    """Model type -> the name (or names) of its class with the task's head."""
    from transformers.models.auto import modeling_auto
    name = {"CausalLM": "CAUSAL_LM", "MaskedLM": "MASKED_LM",
            "SequenceClassification": "SEQUENCE_CLASSIFICATION",
            "TokenClassification": "TOKEN_CLASSIFICATION",
            "Seq2SeqLM": "SEQ_TO_SEQ_CAUSAL_LM",
            "ImageClassification": "IMAGE_CLASSIFICATION",
            "AudioClassification": "AUDIO_CLASSIFICATION",
            "SemanticSegmentation": "SEMANTIC_SEGMENTATION",
            "ObjectDetection": "OBJECT_DETECTION", "CTC": "CTC",
            "AudioXVector": "AUDIO_XVECTOR", "MaskedImageModeling": "MASKED_IMAGE_MODELING",
            "QuestionAnswering": "QUESTION_ANSWERING",
            "MultipleChoice": "MULTIPLE_CHOICE",
            "UniversalSegmentation": "UNIVERSAL_SEGMENTATION",
            "VideoClassification": "VIDEO_CLASSIFICATION",
            "AudioFrameClassification": "AUDIO_FRAME_CLASSIFICATION",
            "ZeroShotImageClassification": "ZERO_SHOT_IMAGE_CLASSIFICATION",
            "SpeechSeq2Seq": "SPEECH_SEQ_2_SEQ", "DepthEstimation": "DEPTH_ESTIMATION",
            "ImageTextToText": "IMAGE_TEXT_TO_TEXT", "PreTraining": "PRETRAINING"}[TASKS[task]]
    heads = getattr(modeling_auto, f"MODEL_FOR_{name}_MAPPING_NAMES")
    if task == "pretraining":   # the pretraining heads of their own (the mapping's others
        return {k: v for k, v in heads.items() if v.endswith("ForPreTraining")}   # are LMs)
    return heads


def _has(cfg, name: str) -> bool:
    """The config has the field, though reading it may be refused (Gemma 4's per-layer
    `head_dim` raises a RuntimeError of its own on a global read)."""
    try:
        return hasattr(cfg, name)
    except RuntimeError:
        return name in vars(cfg)


def _shrunk(cls, task: str = "causal-lm"):
    """`cls` with every size field it has set small; a config inside it (a multimodal
    model's text and vision towers) shrunk the same way. An image model's per-stage lists
    too (VISION, DEPTH_LISTS, WIDTH_LISTS, HEAD_LISTS), an audio model's per-layer ones
    (AUDIO, AUDIO_LISTS)."""
    base = cls()
    vision = task in VISION_TASKS
    small = {**SMALL, **VISION} if vision else {**SMALL, **AUDIO} if task in AUDIO_TASKS \
        else {**SMALL, **IMAGE_TEXT} if task == "image-text" else SMALL
    if task == "speech-seq2seq":   # an audio LM's tower projects to the text's width
        small = {**small, "output_dim": SMALL["hidden_size"]}
    # a size its default leaves 0 is a part the model does not have: left off
    kw = {k: v for k, v in small.items() if _has(base, k) and vars(base).get(k) != 0}
    if vision:   # a per-stage list under a scalar's name (Swin's heads) is the lists' to set
        kw = {k: v for k, v in kw.items() if not isinstance(getattr(base, k), (list, tuple))}
        kw.update(_stage_lists(vars(base)))
        if any(k in vars(base) for k in DEPTH_LISTS):   # stages: their count is the lists'
            for k in ("num_hidden_layers", "num_layers", "hidden_size"):
                kw.pop(k, None)
    if task == "contrastive":   # ALIGN's text projection is sized for its image tower's width
        kw.pop("width_coefficient", None)
    if task in AUDIO_TASKS:
        kw.update({k: [width] * len(vars(base)[k]) for k, width in AUDIO_LISTS.items()
                   if isinstance(vars(base).get(k), (list, tuple))})
    if "kv_lora_rank" in kw:   # latent attention: its rotary head_dim is qk_rope_head_dim's
        kw.pop("head_dim", None)
    if task in ("semantic-seg", "depth"):   # a head on 4 of a ViT's layers: 4 layers, those 4
        if "out_indices" in kw or "out_indices" in dir(base):
            kw.update(num_hidden_layers=4, out_indices=[1, 2, 3, 4])   # after the embedding
        if "backbone_out_indices" in vars(base):
            kw.update(num_hidden_layers=4, backbone_out_indices=[0, 1, 2, 3])
    for name, sub in vars(base).items():
        if isinstance(sub, transformers.PretrainedConfig):
            if sub.model_type == "timm_backbone":   # DETR's ResNet-50 from timm: transformers'
                sub = transformers.ResNetConfig(out_indices=list(sub.out_indices))
            small_sub = _shrunk(type(sub), task)
            stages = getattr(sub, "out_features", None) or ()
            if len(stages) > 1 and set(stages) <= set(small_sub.stage_names):
                small_sub.out_features = stages   # the stages a backbone gives its head
            if name == "backbone_config":   # the switches its head relies on (a DPT head
                default = vars(type(sub)())   # reads Depth Anything's DINOv2 unreshaped)
                for k, v in vars(sub).items():
                    if type(v) is bool and v != default.get(k) and k not in kw:
                        setattr(small_sub, k, v)
            kw[name] = small_sub.to_dict()
    while True:
        try:
            cfg = cls(**kw)
            break
        except AttributeError as e:   # a field the config derives (a property): leave it
            name = re.search(r"property '(\w+)'", str(e))
            if not name or name[1] not in kw:
                raise
            del kw[name[1]]
    layers = getattr(cfg, "num_hidden_layers", None)
    types = getattr(cfg, "layer_types", None)
    if isinstance(layers, int) and isinstance(types, list) and len(types) > layers:
        try:
            cfg.layer_types = types[:layers]
        except AttributeError:   # derived from other fields by a property
            pass
    return cfg


def _stage_lists(fields: dict) -> dict:
    """An image model's per-stage lists shrunk: one block a stage, a quarter of each width
    (an input's 3 channels kept), at most 2 heads; a list image size made IMAGE square."""
    out = {}
    for k, v in fields.items():
        if not (isinstance(v, (list, tuple)) and v and all(type(x) is int for x in v)):
            continue
        if k in DEPTH_LISTS:
            out[k] = [1] * len(v)
        elif k in WIDTH_LISTS:
            out[k] = [x // 4 if x >= 16 else x for x in v]
        elif k in HEAD_LISTS:
            out[k] = [min(x, 2) for x in v]
        elif k == "image_size":
            out[k] = [IMAGE] * len(v)
        elif k == "stage_numb_of_layers":   # HGNet's convolutions per block
            out[k] = [2] * len(v)
    if isinstance(fields.get("embed_dim"), int):   # the first stage's width: a quarter
        out["embed_dim"] = max(fields["embed_dim"] // 4, 8)
    return out


def build(arch: str, device: str = "cpu", lora: bool = False,
          task: str = "causal-lm") -> torch.nn.Module:
    """The shrunk model with the task's head; on "meta" to size it and find its layers
    without the memory. `lora`: peft's LoRA on every Linear but the head, the base frozen."""
    cfg, auto = config(arch, task), auto_class(task)
    with torch.device("meta"):
        n = sum(p.numel() for p in auto.from_config(cfg).parameters())
    if n > MAX_PARAMS:
        raise ValueError(f"{n:,} parameters after the shrink (a size field it does not know)")
    with torch.device(device):
        if not lora:
            torch.manual_seed(0)
            return auto.from_config(cfg)
        for p in (0.1, 0.0):   # experts' 3-D parameters take LoRA without dropout only
            torch.manual_seed(0)
            try:
                return with_lora(auto.from_config(cfg), p)
            except ValueError:
                if p == 0.0:
                    raise
    raise AssertionError("unreachable")


def with_lora(model: torch.nn.Module, dropout: float) -> torch.nn.Module:
    """peft's LoRA on every Linear but the head, the base frozen."""
    import peft

    return peft.get_peft_model(model, peft.LoraConfig(
        r=4, lora_alpha=8, lora_dropout=dropout, target_modules="all-linear"))


def reloaded(held: list, task: str) -> torch.nn.Module:
    """The model in `held` written by `save_pretrained` to a fresh folder, let go of, and
    loaded back by `from_pretrained`, as a fine-tune starts with no other model in memory
    (Note [Storages over a mapped file])."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="memledger-pretrained-") as tmp:
        held.pop().save_pretrained(tmp)
        return auto_class(task).from_pretrained(tmp)


def blocks_glob(model: torch.nn.Module) -> str:
    """The policy glob of the model's decoder layers: its ModuleList with the most
    parameters ("model.layers.*"); a list of lists (PoolFormer's stages, each a ModuleList
    of blocks) is its blocks ("poolformer.encoder.block.*.*"): a ModuleList never runs."""
    lists = [(sum(p.numel() for p in m.parameters()), name, m)
             for name, m in model.named_modules() if isinstance(m, torch.nn.ModuleList)
             and len(m) >= 2 and name]
    if not lists:
        raise ValueError("no ModuleList of layers")
    _, name, blocks = max(lists, key=lambda x: x[:2])
    nested = all(isinstance(b, torch.nn.ModuleList) for b in blocks)
    return name + (".*.*" if nested else ".*")


def first_blocks(glob: str) -> tuple[str, str]:
    """The first and second of the blocks `glob` selects ("model.layers.0", "...1"); of a
    list of lists, the first and second lists' blocks."""
    return glob.replace("*", "0", 1), glob.replace("*", "1", 1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--arch", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq", type=int, default=SEQ, help="tokens per sequence (at most 128)")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--amp", action="store_true", help="forward under bf16 autocast")
    p.add_argument("--lora", action="store_true", help="peft LoRA on every Linear, r=4")
    p.add_argument("--grad-ckpt", action="store_true",
                   help="the model checkpoints its own layers (gradient_checkpointing_enable)")
    p.add_argument("--task", choices=TASKS, default="causal-lm", help="the head and its loss")
    p.add_argument("--show", action="store_true", help="print the blocks' glob and stop")
    p.add_argument("--from-pretrained", action="store_true",
                   help="fine-tune as users do: the model written by save_pretrained, then "
                        "loaded by from_pretrained (its weights over the mapped file)")
    a = p.parse_args()
    try:
        reload = a.from_pretrained and not a.show
        model = build(a.arch, "meta" if a.show else "cpu", a.lora and not reload, a.task)
        if reload:   # the base written and loaded back, then LoRA on it, as fine-tunes do
            held = [model]
            del model
            model = reloaded(held, a.task)
            if a.lora:   # experts' 3-D parameters take LoRA without dropout only
                try:
                    model = with_lora(model, 0.1)
                except ValueError:
                    model = with_lora(reloaded([model], a.task), 0.0)
        glob = blocks_glob(model)
    except Exception as e:   # noqa: BLE001 (any library error: this arch cannot be built)
        print(f"{a.arch}: cannot build: {type(e).__name__}: {str(e).splitlines()[0][:200]}",
              file=sys.stderr)
        raise SystemExit(EXIT_CANNOT_BUILD)
    if a.show:
        print(glob)
        return
    model.train()
    if a.grad_ckpt:   # its name from transformers 5.x; the older one before
        (getattr(model, "activation_checkpointing_enable", None) or
         model.gradient_checkpointing_enable)()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    np.random.seed(0)   # wav2vec2's masks and negatives, SpecAugment: numpy's generator
    for _ in range(a.steps):
        for _ in range(a.accum):
            ids = torch.randint(3, V, (a.batch_size, a.seq), generator=gen)
            batch = _batch(a.task, ids, gen, model)
            target = batch.pop("target", None)   # a loss the script computes itself
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp):
                loss = _loss(model(**batch), target) / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def _loss(out, target: torch.Tensor | None) -> torch.Tensor:
    """The head's loss; where transformers computes none, the one a user writes: a depth
    map's L1 to the target, the prediction resized to it (depth models refuse labels);
    CLIP's symmetric cross entropy over a retrieval model's image-text logits (BLIP-2's)."""
    if target is not None:
        depth = torch.nn.functional.interpolate(
            out.predicted_depth[:, None], size=target.shape[-2:], mode="bilinear")
        return torch.nn.functional.l1_loss(depth[:, 0], target)
    if out.loss is not None:
        return out.loss
    logits = out.logits_per_image
    target = torch.arange(len(logits))
    return (torch.nn.functional.cross_entropy(logits, target)
            + torch.nn.functional.cross_entropy(logits.t(), target)) / 2


def _audio_shape(cfg, batch: int) -> tuple[int, ...]:
    """The input an audio classifier takes: a raw waveform, an AST's spectrogram (frames x
    mel bins), Whisper's log-mel features (bins x twice its positions), or w2v-BERT's
    filter-bank frames."""
    kind = cfg.model_type
    if kind == "audio-spectrogram-transformer":
        return batch, cfg.max_length, cfg.num_mel_bins
    if kind == "whisper" or hasattr(cfg, "max_source_positions") and \
            hasattr(cfg, "num_mel_bins"):   # Whisper's, and the audio LMs' Whisper towers
        return batch, cfg.num_mel_bins, 2 * cfg.max_source_positions
    if kind == "wav2vec2-bert":
        return batch, 64, cfg.feature_projection_input_dim
    if _mel_encoder(cfg):
        return batch, 64, cfg.encoder_config.num_mel_bins
    if hasattr(cfg, "input_feat_per_channel"):   # Speech2Text's filter banks
        return batch, 64, cfg.input_feat_per_channel * cfg.input_channels
    if kind.startswith("seamless_m4t"):   # its stacked filter banks
        return batch, 64, cfg.feature_projection_input_dim
    return batch, SAMPLES


def _mel_encoder(cfg) -> bool:
    """A CTC model over an encoder of log-mel frames (Parakeet, LASR): it takes their mask."""
    return hasattr(getattr(cfg, "encoder_config", None), "num_mel_bins")


def _takes(model, name: str) -> bool:
    """The model's forward takes `name` (peft's wrapper's takes anything: its model's)."""
    return name in inspect.signature(_base(model).forward).parameters


def _base(model):
    """The model peft wraps, or the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


_PLACEHOLDERS: dict[int, int] = {}   # model -> placeholder tokens an image (or clip) takes
_IMAGE_LISTS: set[int] = set()   # models that take a list of images a sample


def _placeholders(model, features: str, inputs: dict, n: int) -> int:
    """How many placeholder tokens one of the `n` images (or clips) in `inputs` takes: the
    model's `features` method (`get_image_features`) counted once, without gradient (what
    a processor knows from the model's config, found without one)."""
    if id(model) not in _PLACEHOLDERS:
        with torch.no_grad():
            f = getattr(model, features)(**inputs)
        f = getattr(f, "pooler_output", f)
        rows = sum(x.shape[0] for x in f) if isinstance(f, (list, tuple)) else \
            f.shape[0] if f.dim() == 2 else f.shape[0] * f.shape[1]
        _PLACEHOLDERS[id(model)] = rows // n
    return _PLACEHOLDERS[id(model)]


def _image_tokens(model, pixels: dict) -> int:
    """The placeholders an image takes; a model that refuses a tensor of images (Idefics
    and kin) takes a list of images a sample from then on."""
    n = len(pixels.get("image_grid_thw", pixels["pixel_values"]))
    try:
        return _placeholders(model, "get_image_features", pixels, n)
    except ValueError:
        _IMAGE_LISTS.add(id(model))
        pixels["pixel_values"] = pixels["pixel_values"][:, None]
        return _placeholders(model, "get_image_features", pixels, n)


def _pretraining_batch(ids: torch.Tensor, gen: torch.Generator, model) -> dict:
    """A pretraining head's inputs: masked tokens with the next-sentence (or sentence-
    order) label a BERT-like head takes, or replaced-token labels for a discriminator
    (ELECTRA, Funnel); images for a masked autoencoder (ViT-MAE, Hiera; VideoMAE's clips
    with half their tubes masked); a waveform with its masked frames and sampled
    negatives for wav2vec2's contrastive loss (numpy's generator, seeded by `main`)."""
    base = _base(model)
    n = len(ids)
    if model.main_input_name == "input_values":
        batch = {"input_values": torch.randn(n, SAMPLES, generator=gen)}
        if _takes(model, "mask_time_indices"):
            from transformers.models.wav2vec2 import modeling_wav2vec2 as w2v
            frames = int(base._get_feat_extract_output_lengths(SAMPLES))
            masked = w2v._compute_mask_indices((n, frames), mask_prob=0.2, mask_length=2)
            negatives = w2v._sample_negative_indices(
                (n, frames), base.config.num_negatives, masked)
            batch.update(mask_time_indices=torch.from_numpy(masked),
                         sampled_negative_indices=torch.from_numpy(negatives))
        return batch
    if model.main_input_name == "pixel_values":
        if "VideoMAE" in type(base).__name__:   # clips, half their tubes masked
            cfg = base.config
            tubes = (FRAMES // cfg.tubelet_size) * (IMAGE // cfg.patch_size) ** 2
            masked = torch.rand(n, tubes, generator=gen).argsort(1) < tubes // 2
            return {"pixel_values": torch.randn(n, FRAMES, 3, IMAGE, IMAGE, generator=gen),
                    "bool_masked_pos": masked}   # as many a clip: the decoder reshapes
        return {"pixel_values": torch.randn(n, 3, IMAGE, IMAGE, generator=gen)}
    if type(base).__name__ in ("ElectraForPreTraining", "FunnelForPreTraining"):
        return {"input_ids": ids, "labels": torch.randint(0, 2, ids.shape, generator=gen)}
    batch = _batch("masked-lm", ids, gen, model)
    for name in ("next_sentence_label", "sentence_order_label"):
        if _takes(model, name):
            batch[name] = torch.randint(0, 2, (n,), generator=gen)
    return batch


def _audio_lm_batch(ids: torch.Tensor, gen: torch.Generator, model) -> dict:
    """An audio language model's inputs (Voxtral, Qwen3-ASR): a clip's log-mel features,
    its placeholder tokens (as many as its features), then the transcript, the loss on
    the transcript only."""
    encoder = next(getattr(model.config, k) for k in ("audio_config", "encoder_config")
                   if hasattr(model.config, k))
    frames_first = hasattr(encoder, "input_dim")   # Granite Speech: frames x features
    frames = 2 * getattr(encoder, "max_source_positions", 0) or \
        4 * getattr(encoder, "n_window", 16)   # Whisper-like towers: mel bins x frames,
    shape = (len(ids), 64, encoder.input_dim) if frames_first else \
        (len(ids), encoder.num_mel_bins, frames)   # Qwen3-ASR's in chunks of 2 windows
    audio = {"input_features": torch.randn(shape, generator=gen)}
    if _takes(model, "input_features_mask"):   # every frame valid
        audio["input_features_mask"] = torch.ones(
            len(ids), shape[1 if frames_first else -1], dtype=torch.bool)
    n = _placeholders(model, "get_audio_features", audio, len(ids))
    ids = ids.clone()
    ids[ids == AUDIO_TOKEN] = 3
    ids[:, :n] = AUDIO_TOKEN
    return {"input_ids": ids, **audio, "labels": ids.masked_fill(ids == AUDIO_TOKEN, -100)}


def _requires(fn, name: str) -> bool:
    """`fn` has a parameter `name` without a default."""
    p = inspect.signature(fn).parameters.get(name)
    return p is not None and p.default is inspect.Parameter.empty


def _pixels(model, n: int, gen: torch.Generator) -> dict:
    """`n` 64-pixel images as the model takes them: a tensor of images, a video model's
    clips of FRAMES, or SigLIP 2's patches with their mask and grid."""
    if model.main_input_name == "pixel_values_videos":
        return {"pixel_values_videos": torch.randn(n, FRAMES, 3, IMAGE, IMAGE, generator=gen)}
    if _takes(model, "image_grid_thw"):   # Qwen-VL: GRID x GRID patches, flattened
        vision = model.config.vision_config
        patch = 3 * getattr(vision, "temporal_patch_size", 1) * vision.patch_size ** 2
        return {"pixel_values": torch.randn(n * GRID * GRID, patch, generator=gen),
                "image_grid_thw": torch.tensor([[1, GRID, GRID]] * n)}
    images = torch.randn(n, 3, IMAGE, IMAGE, generator=gen)
    if id(model) in _IMAGE_LISTS:
        return {"pixel_values": images[:, None]}
    base = _base(model)
    if _requires(getattr(base, "get_image_features", base.forward), "image_sizes"):   # Pixtral towers: each image's size;
        if getattr(model.config, "image_grid_pinpoints", None):   # LLaVA-NeXT's: the image
            images = torch.stack([images, images], 1)   # and its one tile
        return {"pixel_values": images, "image_sizes": torch.tensor([[IMAGE, IMAGE]] * n)}
    if _takes(model, "spatial_shapes"):
        side = IMAGE // model.config.vision_config.patch_size
        patch = 3 * model.config.vision_config.patch_size ** 2
        return {"pixel_values": torch.randn(n, side * side, patch, generator=gen),
                "pixel_attention_mask": torch.ones(n, side * side, dtype=torch.long),
                "spatial_shapes": torch.tensor([[side, side]] * n)}
    return {"pixel_values": images}


def _batch(task: str, ids: torch.Tensor, gen: torch.Generator, model) -> dict:
    """The model's inputs and the labels its head computes the task's loss from."""
    if task == "image-cls":   # images, or ImageGPT's colour clusters, one label each
        labels = torch.randint(0, LABELS, (len(ids),), generator=gen)
        if model.main_input_name == "input_ids":
            return {"input_ids": ids, "labels": labels}
        images = torch.randn(len(ids), 3, IMAGE, IMAGE, generator=gen)
        return {model.main_input_name: images, "labels": labels}
    if task == "pretraining":
        return _pretraining_batch(ids, gen, model)
    if task == "depth":   # a depth map of each image (0.5-1.5), the script's own loss
        images = torch.randn(len(ids), 3, IMAGE, IMAGE, generator=gen)
        return {model.main_input_name: images,
                "target": torch.rand(len(ids), IMAGE, IMAGE, generator=gen) + 0.5}
    if task == "image-text":   # an image then its caption; the loss on the caption only
        pixels = _pixels(model, len(ids), gen)
        n = _image_tokens(model, pixels)
        ids = ids.clone()
        ids[ids == IMAGE_TOKEN] = 3
        ids[:, :n] = IMAGE_TOKEN
        batch = {"input_ids": ids, **pixels,
                 "labels": ids.masked_fill(ids == IMAGE_TOKEN, -100)}
        if _takes(model, "mm_token_type_ids"):   # Qwen2-VL's: 1 where an image's token is
            batch["mm_token_type_ids"] = (ids == IMAGE_TOKEN).long()
        return batch
    if task == "contrastive":   # image-caption pairs: each image's own caption the match
        return {"input_ids": ids[:, :CAPTION], **_pixels(model, len(ids), gen),
                **({"return_loss": True} if _takes(model, "return_loss") else {})}
    if task == "video-cls":   # clips of FRAMES 64-pixel frames, one label each
        clips = torch.randn(len(ids), FRAMES, 3, IMAGE, IMAGE, generator=gen)
        return {"pixel_values" if model.main_input_name != "pixel_values_videos"
                else model.main_input_name: clips,
                "labels": torch.randint(0, LABELS, (len(ids),), generator=gen)}
    if task == "masked-image":   # half the patches masked, their pixels reconstructed
        images = torch.randn(len(ids), 3, IMAGE, IMAGE, generator=gen)
        patches = (IMAGE // model.config.patch_size) ** 2
        return {model.main_input_name: images,
                "bool_masked_pos": torch.rand(len(ids), patches, generator=gen) < 0.5}
    if task == "qa":   # an answer span in each sequence
        start = torch.randint(0, ids.shape[1] - 8, (len(ids),), generator=gen)
        return {"input_ids": ids, "start_positions": start, "end_positions": start + 7}
    if task == "multiple-choice":   # each question with its CHOICES answers, one right
        return {"input_ids": torch.randint(3, V, (len(ids), CHOICES, ids.shape[1]),
                                           generator=gen),
                "labels": torch.randint(0, CHOICES, (len(ids),), generator=gen)}
    if task == "universal-seg":   # 2 masks an image, a class each (and OneFormer's task)
        images = torch.randn(len(ids), 3, IMAGE, IMAGE, generator=gen)
        batch = {"pixel_values": images,
                 "mask_labels": [(torch.rand(2, IMAGE, IMAGE, generator=gen) < 0.5).float()
                                 for _ in ids],
                 "class_labels": [torch.randint(0, LABELS, (2,), generator=gen) for _ in ids]}
        if hasattr(model.config, "task_seq_len"):   # OneFormer: the task's tokens
            batch["task_inputs"] = torch.randint(3, V, (len(ids), model.config.task_seq_len),
                                                 generator=gen)
        return batch
    if task == "semantic-seg":   # a class for every pixel
        images = torch.randn(len(ids), 3, IMAGE, IMAGE, generator=gen)
        return {model.main_input_name: images,
                "labels": torch.randint(0, LABELS, (len(ids), IMAGE, IMAGE), generator=gen)}
    if task == "object-detection":   # 1-3 boxes an image (centre, size: fractions)
        images = torch.randn(len(ids), 3, IMAGE, IMAGE, generator=gen)
        counts = torch.randint(1, 4, (len(ids),), generator=gen).tolist()
        return {model.main_input_name: images, "labels": [
            {"class_labels": torch.randint(0, LABELS, (n,), generator=gen),
             "boxes": torch.rand(n, 4, generator=gen) * 0.5 + 0.25} for n in counts]}
    if task == "speech-seq2seq" and model.main_input_name == "input_ids":   # an audio LM:
        return _audio_lm_batch(ids, gen, model)   # placeholders, then the transcript
    if task in AUDIO_TASKS:   # a waveform, or the features the model's extractor makes
        audio = torch.randn(_audio_shape(model.config, len(ids)), generator=gen)
        batch = {model.main_input_name: audio}
        if _mel_encoder(model.config):
            batch["attention_mask"] = torch.ones(audio.shape[:2], dtype=torch.long)
        if task == "speech-seq2seq":   # a transcript of TRANSCRIPT tokens
            return {**batch, "labels": ids[:, :TRANSCRIPT].clone()}
        if task == "ctc":   # a transcript of 4-8 characters each, padded with -100
            text = ids[:, :8] % (model.config.vocab_size - 1) + 1
            text[len(ids) // 2:, 4:] = -100
            return {**batch, "labels": text}
        if task == "audio-frames":   # a one-hot class for every frame the encoder makes
            frames = int(model._get_feat_extract_output_lengths(SAMPLES)) \
                if audio.dim() == 2 else audio.shape[1]
            classes = torch.randint(0, LABELS, (len(ids), frames), generator=gen)
            return {**batch, "labels": torch.nn.functional.one_hot(classes, LABELS).float()}
        return {**batch, "labels": torch.randint(0, LABELS, (len(ids),), generator=gen)}
    if task == "causal-lm":
        return {"input_ids": ids, "labels": ids}
    if task == "masked-lm":
        keep = torch.rand(ids.shape, generator=gen) < 0.15
        return {"input_ids": ids.masked_fill(keep, 3), "labels": ids.masked_fill(~keep, -100)}
    if task == "seq-cls":   # each sequence ends in eos (BART-likes classify from it)
        ids[:, -1] = SMALL["eos_token_id"]
        return {"input_ids": ids,
                "labels": (torch.rand(len(ids), LABELS, generator=gen) < 0.3).float()}
    if task == "token-cls":
        return {"input_ids": ids, "labels": torch.randint(0, LABELS, ids.shape, generator=gen)}
    return {"input_ids": ids, "labels": ids[:, : ids.shape[1] // 2].clone()}   # seq2seq


if __name__ == "__main__":
    main()
