"""A recurrent state carried from one step into the next (check `cross_step_retention`).

    python carried.py --cell gru     # `out, h = rnn(x, h)`: h carries step 1's graph, and
                                     # step 2's backward fails through it
    python carried.py --cell lstm    # `out, hidden = lstm(x, hidden)`: a tuple (h, c)
    python carried.py --cell cell    # an RNNCell unrolled by hand over each batch's steps
    python carried.py --cell values  # the LSTM's (h, c) kept as a dict's values view, as
                                     # HRM-pytorch returns its hidden states
    python carried.py --cell smooth  # no recurrent state: the loss smoothed by an EMA kept
                                     # in a dict undetached (`smooth["loss"] = loss`), as
                                     # torchmd-net's LNNP keeps it detached
    python carried.py --cell ... --fixed   # the state detached where each step begins
    python carried.py --cell gru --learned --fixed   # the first state learned (`Start`,
                                     # whose parameter trains in step 1 only: later steps
                                     # start from the state carried, detached), as
                                     # memformer's memory slots (Note [A state carried in
                                     # from an earlier step], memledger/doctor/graph.py)
"""
import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--cell", choices=["gru", "lstm", "cell", "values", "smooth"], default="gru")
p.add_argument("--fixed", action="store_true")
p.add_argument("--learned", action="store_true")
p.add_argument("--steps", type=int, default=3)
ARGS = p.parse_args()



class Start(nn.Module):
    """The first state, learned; the state carried in, once there is one."""

    def __init__(self) -> None:
        super().__init__()
        self.h0 = nn.Parameter(torch.zeros(1, 1, 16))

    def forward(self, h):
        return self.h0.expand(1, 4, 16) if h is None else h


def lstm_step(x, state):
    """The LSTM, its state handed back as a dict's values view (HRM-pytorch's forward
    returns its hidden states as `hiddens_dict.values()`)."""
    out, (h, c) = rnn(x, tuple(state))
    return out, {"h": h, "c": c}.values()


torch.manual_seed(0)
rnn = {"gru": nn.GRU(8, 16, batch_first=True), "lstm": nn.LSTM(8, 16, batch_first=True),
       "cell": nn.RNNCell(8, 16), "values": nn.LSTM(8, 16, batch_first=True),
       "smooth": nn.GRU(8, 16, batch_first=True)}[ARGS.cell]
head = nn.Linear(16, 1)
start = Start()
opt = torch.optim.SGD([*rnn.parameters(), *head.parameters(),
                       *(start.parameters() if ARGS.learned else ())], lr=0.1)
h = None if ARGS.learned else torch.zeros(1, 4, 16)
hidden = (torch.zeros(1, 4, 16), torch.zeros(1, 4, 16))
state = torch.zeros(4, 16)
view = {"h": torch.zeros(1, 4, 16), "c": torch.zeros(1, 4, 16)}.values()
smooth = {}
for step in range(ARGS.steps):
    x = torch.randn(4, 5, 8)
    if ARGS.fixed and h is not None:
        h = h.detach()
        hidden = tuple(s.detach() for s in hidden)
        state = state.detach()
        view = tuple(s.detach() for s in view)
    if ARGS.cell == "gru":
        out, h = rnn(x, start(h))
    elif ARGS.cell == "lstm":
        out, hidden = rnn(x, hidden)
    elif ARGS.cell == "values":
        out, view = lstm_step(x, view)
    elif ARGS.cell == "smooth":
        out, _ = rnn(x)
    else:
        for t in range(x.shape[1]):
            state = rnn(x[:, t], state)
        out = state
    loss = head(out).pow(2).mean()
    if ARGS.cell == "smooth":
        loss = 0.5 * loss + 0.5 * smooth.get("loss", loss.detach())
        smooth["loss"] = loss.detach() if ARGS.fixed else loss
    opt.zero_grad()
    loss.backward()
    opt.step()
