"""Note [Ranks the script starts itself] (memledger/trace/own_ranks.py): a script that starts
its own distributed job (Lightning's Trainer(devices=2) makes this process rank 0 of ranks
it starts; its ddp_spawn trains in children only) is refused in one line, exit 2, where
memledger used to trace rank 0 as a single process, or say "ran no optimizer step".
Checked by hand on tests/clients/train_lightning.py --devices 2 [--strategy ddp_spawn]."""

from __future__ import annotations

import textwrap

import pytest
import torch.distributed as dist

from memledger.errors import EXIT_OK, EXIT_USAGE
from memledger.trace.own_ranks import SPAWN_MESSAGE, job_message
from memledger.trace.script import run_and_classify

# rank 0 of a world of 2 in this process, on torch's fake backend (no other process needed)
WORLD_OF = """
import torch, torch.distributed as dist
import torch.testing._internal.distributed.fake_pg as fake_pg
dist.init_process_group("fake", store=fake_pg.FakeStore(), rank=0, world_size={world})
model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.fixture
def script(tmp_path, monkeypatch):
    for k in ("RANK", "MASTER_PORT"):   # set, then removed: undone whatever the script sets
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)

    def write(body: str):
        p = tmp_path / "train.py"
        p.write_text(textwrap.dedent(body))
        return p
    yield write
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_world_the_script_started_is_refused_at_its_first_step(script):
    out = run_and_classify(script(WORLD_OF.format(world=2)), [])
    assert (out.code, out.reason) == (EXIT_USAGE, job_message(2))
    assert out.reason.startswith("the script started a distributed job of its own (2 ranks")
    assert "--nproc 2" in out.reason and "\n" not in out.reason


@pytest.mark.parametrize("world, rank_env", [(1, None), (2, "0")])
def test_one_rank_or_a_world_memledger_launched_is_traced(script, monkeypatch, world,
                                                          rank_env):
    if rank_env is not None:     # torchrun (--nproc) and FakeWorld set RANK before the script
        monkeypatch.setenv("RANK", rank_env)
    out = run_and_classify(script(WORLD_OF.format(world=world)), [])
    assert (out.code, out.reason) == (EXIT_OK, "script finished")


def test_a_job_spawned_elsewhere_is_named_not_a_missing_step(script):
    # Lightning's ddp_spawn launcher sets MASTER_PORT here and trains in the children
    out = run_and_classify(script("import os\nos.environ['MASTER_PORT'] = '29517'\n"), [])
    assert (out.code, out.reason) == (EXIT_USAGE, SPAWN_MESSAGE)



def test_an_evaluation_with_a_process_group_of_its_own_is_not_a_spawned_job(script):
    out = run_and_classify(script("""
        import os, torch
        os.environ['MASTER_PORT'] = '29518'
        torch.nn.Linear(2, 2)(torch.ones(1, 2))
    """), [])
    assert (out.code, out.reason) == (EXIT_OK, "script finished")
