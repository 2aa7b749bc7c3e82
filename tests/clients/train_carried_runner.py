"""A hidden state carried from step to step (truncated BPTT), by a loop the script does not
write in its own `main` (tests/clients/test_carried_runner.py; Notes [A loop a library
runs] in memledger/trace/step_holders.py and [A carried state, named by its holder] in
memledger/ledger/carried.py).

The recurrent cell of train_carried_state.py `--add` (`h = tanh(x @ W_in + h_prev)`, dim
16, batch 8, 2 unrolled cells per step, a Linear(16, 1) head, MSE, SGD): each step starts
from the step before's last state, detached. `--runner`:

- `script`: the loop in `main`, as train_carried_state.py writes it.
- `function`: each step is `train_chunk(model, opt, xs, y, h)`, a function of the script
  that returns its new state (`h = train_chunk(...)` in `main`): two functions of the
  script hold a state under the name `h`, each its own.
- `library`: the loop is a trainer's `fit(model, opt, batches)` in a stand-in library, a
  module compiled under the interpreter's site-packages (`memledger_test_tbptt/loop.py`;
  no file is written: the code's file name is what makes its frames a library's), as a
  package's trainer runs truncated BPTT for the script.
- `dict`: the same library's `fit_into(model, opt, batches, state)`, which also writes its
  state into the script's dict as it goes (`state["h"] = h`, to resume from): the
  library's frame and the script's both hold it (Note [The holder a user acts on]).
- `generator`: the same library's `chunks(model, batches)`, a generator of one loss per
  chunk that keeps the state in its own frame; the script runs backward and the optimizer
  between two yields, so at each step end the library's frame is suspended, off the stack
  (Note [A state a suspended generator holds] in memledger/trace/step_holders.py).

    memledger trace tests/clients/train_carried_runner.py -o run.ledger --steps 3 \
        -- --runner library
    memledger show run.ledger     # the state reads `other`, named `fit.h (carried by ...)`
"""

import argparse
import os
import sysconfig

import torch
from torch import nn

LIBRARY = os.path.join(sysconfig.get_paths()["purelib"], "memledger_test_tbptt", "loop.py")
FIT = '''
def fit(model, opt, batches):
    """A library's truncated BPTT: the state carried from chunk to chunk, detached."""
    h = None
    for xs, y in batches:
        carried = None if h is None else h.detach()
        out, h = model(xs, carried)
        loss = mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return h


def fit_into(model, opt, batches, state):
    """The same loop, keeping its state in the caller's dict as it goes (to resume)."""
    h = None
    for xs, y in batches:
        carried = None if h is None else h.detach()
        out, h = model(xs, carried)
        state["h"] = h
        loss = mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def chunks(model, batches):
    """The same loop as a generator: a loss per chunk, the state kept in its own frame."""
    h = None
    for xs, y in batches:
        carried = None if h is None else h.detach()
        out, h = model(xs, carried)
        yield mse_loss(out, y)
'''


class Net(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.cell = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, xs: torch.Tensor, h: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        for x in xs:
            z = self.cell(x)
            h = torch.tanh(z if h is None else z + h)
        return self.head(h), h


def train_chunk(model: nn.Module, opt: torch.optim.Optimizer, xs: torch.Tensor,
                y: torch.Tensor, h: torch.Tensor | None) -> torch.Tensor:
    carried = None if h is None else h.detach()
    out, h = model(xs, carried)
    loss = nn.functional.mse_loss(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", choices=["script", "function", "library", "dict",
                                         "generator"],
                    default="script")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--unroll", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    dim, batch = 16, 8
    model = Net(dim)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = [(torch.randn(args.unroll, batch, dim), torch.randn(batch, 1))
               for _ in range(args.steps)]
    if args.runner == "library":
        ns = {"mse_loss": nn.functional.mse_loss}
        exec(compile(FIT, LIBRARY, "exec"), ns)
        ns["fit"](model, opt, batches)
        return
    if args.runner == "generator":
        ns = {"mse_loss": nn.functional.mse_loss}
        exec(compile(FIT, LIBRARY, "exec"), ns)
        for loss in ns["chunks"](model, batches):   # the library's state, in its frame
            opt.zero_grad()
            loss.backward()
            opt.step()
        return
    if args.runner == "dict":
        state: dict = {}    # the script's: the library writes its state into it
        ns = {"mse_loss": nn.functional.mse_loss}
        exec(compile(FIT, LIBRARY, "exec"), ns)
        ns["fit_into"](model, opt, batches, state)
        return
    h = None
    for xs, y in batches:
        if args.runner == "function":
            h = train_chunk(model, opt, xs, y, h)
            continue
        carried = None if h is None else h.detach()
        out, h = model(xs, carried)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
