"""Note [TorchScript inside a region] (memledger/replay/scripted.py): checkpoint and
selective refuse a region that is or holds a scripted module, in predict as in measure."""

import pytest

from memledger.errors import PolicyRefused
from memledger.replay.scripted import refuse_scripted_regions

MODULES = [("blocks.0", "Sequential"), ("blocks.0.0", "RecursiveScriptModule"),
           ("blocks.0.1", "LayerNorm"), ("blocks.10", "Sequential"),
           ("blocks.10.0", "TopLevelTracedModule"), ("out", "Linear")]


def test_a_region_holding_a_scripted_module_is_refused_by_name():
    with pytest.raises(PolicyRefused, match=r"^memledger: checkpoint:blocks\.\* would "
                       r"checkpoint blocks\.0, which holds blocks\.0\.0, a TorchScript module"):
        refuse_scripted_regions("checkpoint:blocks.*", ["blocks.0"], MODULES)
    with pytest.raises(PolicyRefused, match=r"would checkpoint blocks\.10\.0, a TorchScript "):
        refuse_scripted_regions("selective:*.*.0", ["blocks.10.0"], MODULES)
    with pytest.raises(PolicyRefused, match="which holds blocks.0.0"):
        refuse_scripted_regions("checkpoint:**", [""], MODULES)   # the whole model


def test_regions_beside_scripted_modules_are_allowed():
    refuse_scripted_regions("checkpoint:*.*.1", ["blocks.0.1", "out"], MODULES)
    # blocks.1 is a prefix of blocks.10's path, not its parent
    refuse_scripted_regions("checkpoint:blocks.1", ["blocks.1"],
                            MODULES + [("blocks.1", "Sequential")])
