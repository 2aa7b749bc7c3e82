"""A forward that turns off a parameter's requires_grad after using it (plain torch,
tests/clients/train_grad_turned_off.py; compressive-transformer-pytorch's
`self.to_kv.weight.detach_()`): Note [A parameter's requires_grad, as the first run had
it], measure/apply.py."""

from tests.clients.harness import HERE, run_client


def test_a_region_whose_forward_detaches_its_weight_is_measured_as_predicted():
    """Each block's `proj.weight` trains in step 1 and is detached in place by its own
    forward. measure refused both policies (and `checkpoint:blocks.0.proj`) before
    ("torch's checkpoint found the re-run unlike the first run (... A different number of
    tensors was saved ...)"): the re-run read the weight without requires_grad and its
    linear saved other tensors. Now each is measured as predicted (61,496 and 58,488 B on
    torch 2.13.0 CPU, the hunt48d helper's AMD box; `memledger compare` found the
    gradients bitwise equal)."""
    pols = ["checkpoint:blocks.*", "selective:blocks.1"]
    run = run_client("train_grad_turned_off.py", [], pols, steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy in pols:
        p = run.policies[policy]
        assert p.measure_refusal == "" and p.predict_refusal == ""
        assert p.measured is not None and p.predicted == p.measured


def test_the_doctor_names_the_parameters_a_forward_detached_in_place():
    """The doctor said nothing: from step 2 on the weights read as frozen, and a frozen
    parameter is no finding. It warns now, once, at the `detach_()` line (Note [A parameter
    detached in place], trace/doctor_probe.py)."""
    from memledger.doctor.run import diagnose_in_process

    report, outcome = diagnose_in_process(HERE / "train_grad_turned_off.py", [], 2)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity) for f in report.findings] == \
        [("detached_parameter", "warning")], [f.line() for f in report.findings]
    f = report.findings[0]
    assert "`blocks.0.proj.weight`, `blocks.1.proj.weight`" in f.message
    assert "in step 1:" in f.message and f.evidence["params"] == 2
    lines = (HERE / "train_grad_turned_off.py").read_text().splitlines()
    assert lines[f.where.line - 1].strip().startswith("self.proj.weight.detach_()")
