"""diff.compare on hand-made captures: exact numbers, causal order, tolerance."""

from __future__ import annotations

import copy

import pytest
import torch

from memledger.verify.capture import digest
from memledger.verify.diff import compare
from memledger.verify.tolerance import Tolerance, noise_floors, tensor_diff


def _step(w=(1.0, -2.0), grad=(0.5, 0.25), run_mean=(0.0,), inputs=(1.0, 2.0)):
    return {
        "inputs": [("forward arg[0]", digest(torch.tensor(inputs)))],
        "grads": {"w": torch.tensor(grad), "frozen": None},
        "params": {"w": torch.tensor(w), "frozen": torch.tensor([3.0])},
        "buffers": {"bn.running_mean": torch.tensor(run_mean),
                    "bn.num_batches_tracked": torch.tensor(1)},
        "optim": {"w": {"step": torch.tensor(1.0), "exp_avg": torch.tensor(grad) * 0.1}},
        "unmoved": [], "frozen_changed": [], "nonfinite": [],
    }


def _cap(*steps):
    return {"format": "memledger.capture/1", "meta": {}, "steps": list(steps)}


BASE = _cap(_step(), _step(w=(0.9, -1.9)))
EXACT = Tolerance(0.0)


def test_identical_runs_pass_with_zero_worst_gradient():
    c = compare(BASE, copy.deepcopy(BASE), EXACT)
    assert c.finding is None and c.steps_compared == 2
    assert c.gates == {"inputs": True, "gradients": True, "update": True}
    assert (c.worst_gradient.max_abs, c.worst_gradient.max_rel) == (0.0, 0.0)


def test_tensor_diff_is_relative_to_the_tensor_scale():
    # max |a - b| = 2e-4 at the second element; scale max|a| = 2.0 -> rel 1e-4
    d = tensor_diff("g", 0, torch.tensor([1.0, -2.0, 1e-9], dtype=torch.float64),
                    torch.tensor([1.0, -2.0002, 2e-9], dtype=torch.float64))
    assert abs(d.max_abs - 2e-4) < 1e-15 and abs(d.max_rel - 1e-4) < 1e-15


def test_bitwise_tells_negative_zero_apart():
    d = tensor_diff("g", 0, torch.tensor([0.0]), torch.tensor([-0.0]))
    assert (d.max_abs, d.max_rel, d.bitwise) == (0.0, 0.0, False)  # bytes differ, values not
    f = compare(_cap(_step(grad=(0.0, 0.25))), _cap(_step(grad=(-0.0, 0.25))), EXACT).finding
    assert f.message == ("gradient of w differs at step 0: equal values, different bytes "
                         "(a signed zero or a NaN payload) (bitwise)")
    # any tolerance above zero admits it
    assert compare(_cap(_step(grad=(0.0, 0.25))), _cap(_step(grad=(-0.0, 0.25))),
                   Tolerance(1e-12)).finding is None


def test_gradient_difference_stops_at_its_step_and_tolerance_admits_it():
    cand = _cap(_step(grad=(0.5, 0.2500001)), _step(w=(0.7, -1.0), grad=(9.0, 9.0)))
    c = compare(BASE, cand, EXACT)
    f = c.finding
    assert (f.gate, f.step, f.name, c.steps_compared) == ("gradients", 0, "w", 1)
    # only the gradients gate: params and optimizer state follow from different gradients
    assert c.gates == {"inputs": True, "gradients": False, "update": True}
    # rel = 1e-7 (float32-rounded) / 0.5 ~ 3e-7: passes 1e-6 at step 0, then step 1 fails
    c = compare(BASE, cand, Tolerance(1e-6))
    assert (c.finding.gate, c.finding.step) == ("gradients", 1)


def test_missing_gradient_is_the_update_gate_and_outranks_changed_gradients():
    cand = copy.deepcopy(BASE)
    cand["steps"][0]["grads"]["w"] = None
    c = compare(BASE, cand, EXACT)
    assert c.finding.gate == "update" and c.finding.name == "w"
    assert c.finding.message == ("w has no gradient at step 0: the graph was cut (detach, "
                                 "no_grad or a frozen branch)")


def test_buffers_are_compared_even_when_gradients_differ():
    cand = _cap(_step(grad=(0.6, 0.25), run_mean=(0.5,)))
    c = compare(_cap(_step()), cand, EXACT)
    assert c.gates == {"inputs": True, "gradients": False, "update": False}
    assert c.finding.gate == "gradients"   # gate order when no gradient is missing


def test_buffer_difference_names_the_buffer():
    c = compare(_cap(_step()), _cap(_step(run_mean=(0.25,))), EXACT)
    assert c.finding.message == ("buffer bn.running_mean differs after step 0: max abs 0.25, "
                                 "rel inf (bitwise)")


def test_optimizer_state_step_counter_is_compared():
    cand = copy.deepcopy(BASE)
    cand["steps"][0]["optim"]["w"]["step"] = torch.tensor(2.0)
    c = compare(BASE, cand, EXACT)
    assert c.finding.message == ("optimizer state w.step differs after step 0: max abs 1, "
                                 "rel 1 (bitwise)")


def test_frozen_parameter_that_changes_is_named():
    cand = copy.deepcopy(BASE)
    cand["steps"][1]["frozen_changed"] = ["frozen"]
    c = compare(BASE, cand, EXACT)
    assert (c.finding.gate, c.finding.step) == ("update", 1)
    assert c.finding.message == "frozen parameter frozen changed at step 1"
    assert c.frozen_changed == ["frozen"]


def test_different_inputs_fail_everything_after():
    c = compare(BASE, _cap(_step(inputs=(1.0, 3.0))), EXACT)
    assert c.finding.message == "input forward arg[0] differs at step 0"
    assert c.gates == {"inputs": False, "gradients": False, "update": False}


def test_fewer_steps_under_the_policy_fail_update():
    c = compare(BASE, _cap(_step()), EXACT)
    assert c.finding.message == "the script stopped after 1 steps under this policy (baseline: 2)"


def test_noise_floors_are_per_tensor():
    other = _cap(_step(grad=(0.5, 0.2505)), _step(w=(0.9, -1.9)))
    # gradient: |0.25 - 0.2505| / 0.5 = 1e-3; exp_avg = 0.1 × grad -> the same 1e-3
    floors = noise_floors(BASE, other)
    assert sorted(floors) == ["0:gradient:w", "0:optimizer state:w.exp_avg"]
    assert abs(floors["0:gradient:w"] - 1e-3) < 1e-6
    assert noise_floors(BASE, copy.deepcopy(BASE)) == {}


def test_a_noise_floor_widens_only_its_own_tensor():
    tol = Tolerance.with_noise(0.0, {"0:gradient:w": 1e-4, "0:gradient:v": 3e-4,
                                     "0:gradient:u": 5e-4})
    assert tol.limit(0, "gradient:u") == pytest.approx(5e-3, rel=1e-12)   # 10 × its own
    assert tol.limit(0, "gradient:w") == pytest.approx(3e-3, rel=1e-12)   # 10 × the median
    assert tol.limit(1, "gradient:w") == 0.0 and tol.limit(0, "parameter:w") == 0.0
    assert tol.describe() == "bitwise or 10 × the baseline's own noise"
    # gradient 2.5e-3 rel off at step 0: within 3e-3, so only its consequence (the
    # optimizer state, still bitwise) is found
    near = _cap(_step(grad=(0.5, 0.25125)), _step(w=(0.9, -1.9)))
    f = compare(BASE, near, tol).finding
    assert (f.gate, f.name) == ("update", "w.exp_avg")
    # 3.5e-3 is not
    far = _cap(_step(grad=(0.5, 0.25175)), _step(w=(0.9, -1.9)))
    assert compare(BASE, far, tol).finding.gate == "gradients"


def test_digest_covers_dtype_shape_and_bytes():
    a = torch.arange(4, dtype=torch.float32)
    assert digest(a) == digest(a.clone())
    assert digest(a) != digest(a.reshape(2, 2))
    assert digest(a) != digest(a.double())
    assert digest(torch.tensor([0.0])) != digest(torch.tensor([-0.0]))
    assert digest(a[::2]) == digest(torch.tensor([0.0, 2.0]))   # views read as values


def test_digest_and_bitwise_of_a_scalar_expanded_to_size_one():
    # contiguous by torch's rule (size-1 dims), stride 0 all the same: view(uint8) refused
    # it, inside the script's `log_prob` of pyro's `dist.Normal(0., 0.5).expand([1])`
    from memledger.verify.capture import bitwise_equal

    x = torch.tensor(0.5).expand(1)
    y = torch.tensor(0.5).expand(1, 3)[:, :1]
    assert x.stride() == (0,) and x.is_contiguous()
    assert digest(x) == digest(torch.tensor([0.5]))
    assert digest(y) == digest(torch.tensor([[0.5]]))
    assert bitwise_equal(x, torch.tensor([0.5])) and not bitwise_equal(x, torch.tensor([0.25]))
