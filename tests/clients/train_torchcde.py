"""A neural controlled differential equation trained with torchcde, as its README and
`example/time_series_classification.py` / `example/irregular_data.py` write one: irregular
time series (each sample observed at its own sorted random times, time appended as a
channel, some values missing as NaN, a cumulative observation mask for informative
missingness, shorter series padded by filling their last observation forward), made into a
path by `torchcde.hermite_cubic_coefficients_with_backward_differences` (or
`natural_cubic_coeffs`, or `linear_interpolation_coeffs`), a vector field `func` (an
`nn.Module` returning a (hidden, input) matrix per sample, `func.linear1`, `func.linear2`)
that `torchcde.cdeint` integrates against `X.derivative`, an `initial` map from the first
observation and a `readout` from the terminal state; cross-entropy over 3 classes, Adam.
Tiny, seeded, nothing downloaded.

    python tests/clients/train_torchcde.py --steps 3
    memledger trace tests/clients/train_torchcde.py --steps 2 -o cde.ledger -- --adjoint

Flags:
  --interp hermite|natural|linear   the coefficients and the path (`CubicSpline` for the
                                    first two, `LinearInterpolation` for the third)
  --coeffs outside|inside           computed once before the loop (the README's way, the
                                    batches a DataLoader over a TensorDataset of them), or
                                    from each raw batch inside `forward` (as some users do)
  --adjoint                         `cdeint(..., adjoint=True)` (torchcde's default): the
                                    forward solve keeps no graph, the backward solves the
                                    adjoint ODE and calls `func` again inside backward
  --method rk4|dopri5               rk4 with `step_size` (the grid's spacing), or dopri5
  --times interval|grid             the terminal state read out (the README's), or the
                                    solution at every observation (`t=X.grid_points`), read
                                    out at each and averaged over time
"""

import argparse

import torch
import torch.nn.functional as F

import torchcde

BATCH, LENGTH, HIDDEN, WIDTH, CLASSES = 8, 10, 8, 32, 3


class CDEFunc(torch.nn.Module):
    def __init__(self, input_channels: int, hidden_channels: int) -> None:
        super().__init__()
        self.input_channels = input_channels
        self.hidden_channels = hidden_channels
        self.linear1 = torch.nn.Linear(hidden_channels, WIDTH)
        self.linear2 = torch.nn.Linear(WIDTH, input_channels * hidden_channels)

    def forward(self, t, z):
        z = self.linear1(z)
        z = z.relu()
        z = self.linear2(z)
        z = z.tanh()
        return z.view(z.size(0), self.hidden_channels, self.input_channels)


class NeuralCDE(torch.nn.Module):
    def __init__(self, input_channels: int, args) -> None:
        super().__init__()
        self.func = CDEFunc(input_channels, HIDDEN)
        self.initial = torch.nn.Linear(input_channels, HIDDEN)
        self.readout = torch.nn.Linear(HIDDEN, CLASSES)
        self.args = args

    def forward(self, data):
        a = self.args
        coeffs = make_coeffs(data, a.interp) if a.coeffs == "inside" else data
        if a.interp == "linear":
            X = torchcde.LinearInterpolation(coeffs)
        else:
            X = torchcde.CubicSpline(coeffs)
        X0 = X.evaluate(X.interval[0])
        z0 = self.initial(X0)
        kw = dict(method="rk4", options=dict(step_size=1.0)) if a.method == "rk4" \
            else dict(method="dopri5", rtol=1e-3, atol=1e-4)
        if a.times == "grid":   # the solution at every observation, read out at each
            z = torchcde.cdeint(X=X, z0=z0, func=self.func, t=X.grid_points, adjoint=a.adjoint,
                                **kw)
            return self.readout(z).mean(dim=1)
        z_T = torchcde.cdeint(X=X, z0=z0, func=self.func, t=X.interval, adjoint=a.adjoint, **kw)
        return self.readout(z_T[:, 1])


def make_coeffs(x, interp: str):
    if interp == "hermite":
        return torchcde.hermite_cubic_coefficients_with_backward_differences(x)
    if interp == "natural":
        return torchcde.natural_cubic_coeffs(x)
    return torchcde.linear_interpolation_coeffs(x)


def get_data(n: int, gen: torch.Generator):
    """`n` irregularly sampled series of 2 channels, each sample at its own times, a value
    missing here and there, a cumulative mask per channel, and the last quarter of the
    samples shorter (filled forward after time was appended, as torchcde's example says)."""
    t = torch.rand(n, LENGTH, generator=gen).sort(dim=1).values * 4
    y = torch.randint(0, CLASSES, (n,), generator=gen)
    freq = (1.0 + y.float()).unsqueeze(1)
    a = torch.sin(freq * t) + 0.05 * torch.randn(n, LENGTH, generator=gen)
    b = torch.cos(freq * t) + 0.05 * torch.randn(n, LENGTH, generator=gen)
    seen_a = torch.rand(n, LENGTH, generator=gen) > 0.2
    seen_b = torch.rand(n, LENGTH, generator=gen) > 0.2
    seen_a[:, 0] = True
    seen_b[:, 0] = True
    a = a.masked_fill(~seen_a, float("nan"))
    b = b.masked_fill(~seen_b, float("nan"))
    x = torch.stack([t, a, b, seen_a.float().cumsum(1), seen_b.float().cumsum(1)], dim=2)
    short = n - n // 4
    x[short:, LENGTH - 3:] = x[short:, LENGTH - 4:LENGTH - 3]
    return x, y


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--interp", default="hermite", choices=["hermite", "natural", "linear"])
    p.add_argument("--coeffs", default="outside", choices=["outside", "inside"])
    p.add_argument("--adjoint", action="store_true")
    p.add_argument("--method", default="rk4", choices=["rk4", "dopri5"])
    p.add_argument("--times", default="interval", choices=["interval", "grid"])
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    train_X, train_y = get_data(BATCH * 4, gen)
    model = NeuralCDE(train_X.size(-1), args)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = make_coeffs(train_X, args.interp) if args.coeffs == "outside" else train_X
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, train_y),
                                         batch_size=BATCH)
    step = 0
    while step < args.steps:
        for batch, batch_y in loader:
            pred_y = model(batch)
            loss = F.cross_entropy(pred_y, batch_y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            print(f"step {step}  loss {loss.item():.4f}")
            step += 1
            if step == args.steps:
                break


if __name__ == "__main__":
    main()
