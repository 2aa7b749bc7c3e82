"""Policy strings, selectors and TOML files."""

from __future__ import annotations

import pytest

from memledger.errors import MatchesNoModule, PolicyError
from memledger.replay.policies import (
    DEFAULT_SAVE_OPS, PolicyKind, load_policies, parse_policy, resolve,
)

MODS = [("", "GPT"), ("wte", "Embedding"), ("blocks.0", "Block"), ("blocks.0.attn", "Attn"),
        ("blocks.1", "Block"), ("blocks.1.attn", "Attn"), ("blocks.2", "Block"),
        ("head", "Linear"), ("conv.kernel_unary.(0,0)", "PairwiseConv"),
        ("conv.kernel_unary.(0,1)", "PairwiseConv")]


@pytest.mark.parametrize("text,paths", [
    ("checkpoint:blocks.*", ["blocks.0", "blocks.1", "blocks.2"]),   # * stays in a segment
    ("checkpoint:blocks.[0-1]", ["blocks.0", "blocks.1"]),
    ("offload:@Block", ["blocks.0", "blocks.1", "blocks.2"]),
    ("checkpoint:**.attn", ["blocks.0.attn", "blocks.1.attn"]),
    ("checkpoint:blocks.0+offload:blocks.[12]", ["blocks.0", "blocks.1", "blocks.2"]),
    ("none", []),
    # Note [Selectors through a wrapper]: the name `named_modules()` gives through Fabric's
    # `_FabricModule` or torch.compile's OptimizedModule selects the model's own modules
    ("checkpoint:_forward_module.blocks.*", ["blocks.0", "blocks.1", "blocks.2"]),
    ("offload:_orig_mod.blocks.[01].attn", ["blocks.0.attn", "blocks.1.attn"]),
    ("checkpoint:_forward_module._orig_mod.head", ["head"]),
    # Note [Paths a ModuleDict names]: se3-transformer's `kernel_unary["(0,1)"]`
    ("checkpoint:conv.kernel_unary.(0,1)", ["conv.kernel_unary.(0,1)"]),
    ("selective:conv.kernel_unary.(?,1):save=mm,bmm", ["conv.kernel_unary.(0,1)"]),
])
def test_selectors_resolve(text, paths):
    assert [r.path for r in resolve(parse_policy(text), MODS)] == paths


def test_options_and_round_trip():
    p = parse_policy("offload:blocks.*:min=1MiB")
    assert p.parts[0].min_bytes == 1048576   # 1 MiB = 2**20 bytes
    s = parse_policy("selective:@Block:save=mm,bmm")
    assert s.parts[0].kind is PolicyKind.SELECTIVE and s.parts[0].save == ("mm", "bmm")
    assert parse_policy("selective:@Block").parts[0].save == DEFAULT_SAVE_OPS
    assert parse_policy(p.text()) == p


@pytest.mark.parametrize("text,needle", [
    ("explode:blocks.*", "unknown policy kind 'explode'"),
    ("checkpoint", "has no selector"),
    ("checkpoint:blocks.*:min=1MiB", "does not apply to checkpoint"),
    ("offload:blocks.*:min=12", "has no unit"),
    ("checkpoint:blocks.*+", "empty part"),
    ("none+checkpoint:x", "cannot be combined"),
    ("checkpoint:bl{o}cks", "not a module-path glob"),
])
def test_bad_strings_are_one_line_policy_errors(text, needle):
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy(text), MODS)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith("memledger:") and e.value.exit_code == 2


def test_selector_matching_nothing_lists_modules():
    with pytest.raises(PolicyError, match=r"matches no module.*blocks\.0 \(Block\)"):
        resolve(parse_policy("checkpoint:layers.*"), MODS)


def test_a_lone_star_that_could_not_reach_deeper_paths_says_so():
    """Note [A star that stays in its segment]: `offload:*.ff` on a loralib transformer
    (`blocks.0.ff`, `blocks.1.ff`) listed its 21 modules and no reason; now the refusal
    names the `**` form and what it would select. No hint where that matches nothing too."""
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy("offload:*.attn"), MODS)
    assert str(e.value).startswith(
        "memledger: selector '*.attn' matches no module (`*` matches within one path "
        "segment: '**.attn' would match blocks.0.attn, blocks.1.attn); the model's modules "
        "are ")
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy("offload:*.mlp"), MODS)
    assert str(e.value).startswith("memledger: selector '*.mlp' matches no module; ")


def test_nested_and_twice_selected_regions_are_refused():
    with pytest.raises(PolicyError, match="regions nest"):
        resolve(parse_policy("checkpoint:blocks.0+offload:blocks.0.attn"), MODS)
    with pytest.raises(PolicyError, match="selected by both"):
        resolve(parse_policy("checkpoint:blocks.0+offload:@Block"), MODS)


def test_toml_file(tmp_path):
    pols = load_policies("configs/policies.toml")
    assert [p.text() for p in pols][:2] == ["none", "checkpoint:blocks.*"]
    assert str(pols[1]) == "checkpoint every block"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[policy]]\npolicy = "checkpoint:x"\nextra = 1\n')
    with pytest.raises(PolicyError, match="extra"):
        load_policies(bad)


def test_a_size_is_echoed_as_people_write_it():
    """`min=1MiB` came back as `min=1048576B`; the text parses to the same bytes."""
    for text in ("offload:blocks.*:min=1MiB", "offload:blocks.*:min=64KiB",
                 "offload:blocks.*:min=500B"):
        assert parse_policy(text).text() == text
    p = parse_policy("offload:x:min=1.5MiB")
    assert p.text() == "offload:x:min=1536KiB" and parse_policy(p.text()) == p


def test_a_selector_naming_a_module_called_beside_the_model_says_so():
    """A script whose "model" is a function calling `emb`, `blocks` and `head` in turn:
    the model is `emb` (the first top-level module with parameters called), and `show`
    names the others' modules `blocks.0` ... as the script calls them. `blocks.*` matched
    "(none recorded)"; now the error says where those modules are and what to do."""
    mods = [("", "Embedding")]
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy("checkpoint:blocks.*"), mods, others=("blocks", "head"))
    assert str(e.value) == (
        "memledger: selector 'blocks.*' selects modules of 'blocks', which the script calls "
        "beside the model; policies act on the model alone (an Embedding: the first "
        "top-level module with parameters the script called): put it, 'blocks' and 'head' "
        "in one nn.Module whose forward does what the script does, and select inside it")
    with pytest.raises(PolicyError, match=r"selects modules of 'head'"):
        resolve(parse_policy("offload:h*"), mods, others=("blocks", "head"))
    with pytest.raises(PolicyError, match=r"matches no module; the model's modules are "
                       r"\(none: the model, an Embedding, has no submodules\)$"):
        resolve(parse_policy("checkpoint:foo.*"), mods, others=("blocks", "head"))


def test_a_pattern_head_that_matches_the_model_too_names_nothing_beside_it():
    """Note [A pattern's head beside the model]: torch-harmonics' `blocks.N.disco` under
    `*.disco` was refused as selecting "modules of 'loss_fn'" (a loss with no `disco`);
    `*` matches the model's `blocks` too, so the refusal is the plain one, with its hint."""
    mods = [("", "SphereNet"), ("blocks", "ModuleList"), ("blocks.0", "Block"),
            ("blocks.0.disco", "DiscreteContinuousConvS2"), ("encoder", "Conv2d")]
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy("checkpoint:*.disco"), mods, others=("loss_fn",),
                containers={"blocks": "ModuleList"})
    assert "loss_fn" not in str(e.value)
    assert "matches no module (`*` matches within one path segment: '**.disco' would " \
        "match blocks.0.disco)" in str(e.value)
    with pytest.raises(PolicyError, match=r"selects modules of 'loss_fn'"):
        resolve(parse_policy("checkpoint:l*.x"), mods, others=("loss_fn",),
                containers={"blocks": "ModuleList"})


def test_a_selector_that_matches_nothing_names_the_model_modules_none_called_after_the_model():
    """Note [The model's modules, none called after]: the first optimizer step named the
    model (its calls read as 'actor_critic' until then, a trainer module held it) and none
    of its modules ran after, so the ledger's table of called modules is empty. A selector
    matching nothing read "the modules the traced forward called are (none recorded)",
    while measure named the model's modules; now predict names those it knows too."""
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy("checkpoint:palm.layers.*"), [],
                "the modules the traced forward called are", " (policies act on the model)",
                others=("RLHFTrainer",), moved=True, was="actor_critic",
                uncalled=("actor_palm", "actor_palm.layers.0", "critic.head"),
                containers={"actor_palm.layers": "ModuleList"},
                classes={"actor_palm": "PaLM", "actor_palm.layers.0": "Residual",
                         "critic.head": "Linear"})
    assert str(e.value) == (
        "memledger: selector 'palm.layers.*' matches no module; the model's modules are "
        "actor_palm (PaLM), actor_palm.layers.0 (Residual), critic.head (Linear) (policies "
        "act on the model)")


def test_a_selector_of_a_module_made_in_the_forward_says_what_it_is():
    """Note [A selector of a module made in the forward]: a module a block's forward makes
    on each call (named `blocks.0.LowPassFilters` by its caller and class) is no module of
    the model's: a path or a `@Class` that selects only such modules says so, and names the
    module whose forward makes it; a `@Class` that selects the model's own modules of that
    class selects those alone."""
    mods = [("", "Net"), ("blocks.0", "Block"), ("blocks.0.conv", "Conv1d"),
            ("lowpasses", "LowPassFilters")]
    made = {"blocks.0.LowPassFilters": "LowPassFilters",
            "blocks.0.LowPassFilters.Identity": "Identity"}
    with pytest.raises(MatchesNoModule) as e:
        resolve(parse_policy("checkpoint:blocks.*.LowPassFilters"), mods, made=made)
    assert str(e.value) == (
        "memledger: selector 'blocks.*.LowPassFilters' matches 'blocks.0.LowPassFilters', a "
        "LowPassFilters that the model's forward makes on each call and holds nowhere (the "
        "trace names it by its caller and class); a policy acts on the model's own modules "
        "(`named_modules()`), and a module made anew in each call is none of them: select "
        "the module whose forward makes it ('blocks.0'), or make it once in its `__init__` "
        "(`self.low_pass_filters = LowPassFilters(...)`) and select that")
    with pytest.raises(MatchesNoModule, match=r"matches 'blocks\.0\.LowPassFilters\.Identity', "
                       r"an Identity .* \('blocks\.0'\)"):
        resolve(parse_policy("offload:@Identity"), mods, made=made)
    regions = resolve(parse_policy("checkpoint:@LowPassFilters"), mods, made=made)
    assert [r.path for r in regions] == ["lowpasses"]


def test_a_class_selector_of_the_model_itself_says_so():
    """Note [A class selector of the model] (replay/policies.py): the root is never a
    region; `checkpoint:@FrameAverage` on frame-averaging-pytorch's `FrameAverage(net)`
    (the model) was told "matches no module; ... net (Sequential), net.0 (Linear), ...",
    a list without the class it named. It is told that it named the model, and the
    modules directly under it."""
    mods = [("", "Wrapper"), ("net", "Sequential"), ("net.0", "Linear"), ("net.1", "SiLU"),
            ("head", "Linear")]
    with pytest.raises(PolicyError) as e:
        resolve(parse_policy("checkpoint:@Wrapper"), mods)
    assert str(e.value) == (
        "memledger: selector '@Wrapper' names the model's own class: the model is the root "
        "of the selectors, never a region (a policy acts inside its forward); select its "
        "modules instead: head (Linear), net (Sequential)")
    # a class the model holds inside too is selected there, as before
    inner = [*mods, ("net.2", "Wrapper")]
    assert [r.path for r in resolve(parse_policy("checkpoint:@Wrapper"), inner)] == ["net.2"]
