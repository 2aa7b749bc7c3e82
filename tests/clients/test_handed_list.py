"""A list handed to a module call and let go of by the script before the next call returns
(tests/clients/train_handed_list.py): Note [A handed list let go of between calls]
(memledger/trace/collector.py)."""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_handed_list_the_script_lets_go_of_goes_where_it_does():
    """The wrapper hands the model last segment's memory list and rebinds its variable to
    the new one as the call returns; the old memory (8 x 16 fp32, 512 B), saved by this
    segment's `h * mem`, is autograd's alone from there. The trace's table of handed lists
    held it to the wrapper's return, past the no_grad (8, 16, 16) product where the peak
    is: `offload:net.layer` was predicted 20,556 B against 20,044 B measured (512 B over);
    with `--add` (`h + mem` saves nothing, the memory is freed at the rebinding) the same.
    Now the list goes before the next op: predicted = measured."""
    run = run_client("train_handed_list.py", [], ["offload:net.layer"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 21_068
    assert run.policies["offload:net.layer"].predicted == \
        run.policies["offload:net.layer"].measured == 20_044
    run = run_client("train_handed_list.py", ["--add"], ["offload:net.layer"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 20_556
    assert run.policies["offload:net.layer"].predicted == \
        run.policies["offload:net.layer"].measured == 20_044
