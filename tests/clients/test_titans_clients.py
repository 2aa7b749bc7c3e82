"""titans-pytorch (tests/clients/train_titans.py): a NeuralMemory that learns at test time,
its forward taking per-chunk gradients of an inner memory MLP with `vmap(grad(...))` and
applying them through an associative scan; Adam and gradient clipping outside.

Measured (`tests/clients/harness.py run_client`, steps 1, the helper hunt39c, 2026-12-06,
torch 2.13.0 CPU, titans-pytorch 0.5.5): `--mode mem` (a NeuralMemory between two Linears,
dim 16, 16 tokens in chunks of 4; `--seq-len 8` in the test: 482,216 B, `checkpoint:mem`
521,988 B, `offload:mem` 381,616 B) reads the ledger equal to the allocator, 984,008 B;
`checkpoint:mem` 1,051,828 B, `selective:mem` 1,046,708 B, `offload:mem` 667,136 B, and
`offload:mem.memory_model` / `checkpoint:mem.memory_model` (the MLP, called inside the
transform but for its retrieval) 984,008 B, predicted and measured. `--mode mac` (a 2-layer
MemoryAsContextTransformer): ledger 2,648,372 B + 7,928 B of kernel scratch = allocator
2,656,300 B; `checkpoint:layers.0.4.memory_model` 2,629,740 B both sides.
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if importlib.util.find_spec("titans_pytorch") is None:
    pytest.skip("titans-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

MEM = ["--mode", "mem", "--seq-len", "8"]


@pytest.fixture(scope="module", autouse=True)
def _imported():
    import titans_pytorch  # noqa: F401  (einx, tensordict and friends: before any pass)


def test_a_memory_that_differentiates_with_torch_func_in_its_forward_is_traced():
    """`trace` refused the script at once (exit 2: "`titans_pytorch` (called by the script)
    at titans_pytorch/neural_memory.py:714 differentiates with torch.func ...; trace the
    script with an option of `titans_pytorch` that does without torch.func", which it has
    not): torch.func's transforms refuse to run under saved-tensor hooks, and memledger's
    were on. They now step aside while a transform runs (Note [torch.func transforms under
    memledger's hooks], trace/func_transforms.py), in trace and measure alike: what the
    outer graph saves inside the transform is counted as temporaries, resident under
    every policy on both sides; a region called inside the transform (the memory MLP)
    runs plain there, in measure as in replay."""
    run = run_client("train_titans.py", MEM, ["checkpoint:mem", "offload:mem",
                                              "offload:mem.memory_model"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 482_216
    assert {t: (p.predicted, p.measured) for t, p in run.policies.items()} == {
        "checkpoint:mem": (521_988, 521_988), "offload:mem": (381_616, 381_616),
        "offload:mem.memory_model": (482_216, 482_216)}


def test_the_doctor_says_the_memory_mlp_ran_with_other_tensors_in_its_weights_places():
    """NeuralMemory runs its memory MLP (`memory_model`) by `functional_call` with per-head
    copies (`memory_model_parameters`) in its weights' places; the MLP's own weights stay
    in `model.parameters()` and never get a gradient. The doctor said "their modules ran
    but the output never reached the loss" of the MLP's norm, and "did not run" of its
    weights, kept in a ParameterList (Note [Parameters a container holds], Note
    [Parameters a call ran without], trace/doctor_probe.py)."""
    from memledger.doctor.run import diagnose_in_process
    from tests.clients.harness import HERE

    report, outcome = diagnose_in_process(HERE / "train_titans.py", MEM, 1)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("unused_parameter", "warning")
    assert f.message == (
        "3 trainable parameters (`mem.memory_model.model.weights.0`, "
        "`mem.memory_model.model.weights.1`, `mem.memory_model.norm.gamma`) got no gradient "
        "in step 1 while 18 others did: their modules ran, but with other tensors in their "
        "place (`torch.func.functional_call`, torch.nn.utils.stateless), so these were never "
        "read; hand them to the call, or leave them out of the optimizer")
    assert f.evidence["bytes_without_grad"] == 2 * 16 * 64 * 4 + 16 * 4
