"""Cooper (cooper-optim) as its README trains a constrained problem: a small classifier whose
`ConstrainedMinimizationProblem` holds one inequality constraint with a Lagrange multiplier
(`cooper.multipliers.DenseMultiplier`, a second parameter set with its own optimizer,
`maximize=True`), each step one `roll()` of a constrained optimizer that runs the forward,
the backward of the primal and dual Lagrangians and both steps itself. Seeded, tiny,
nothing downloaded.

    python tests/clients/train_cooper.py --steps 3 --optimizer extra
    memledger trace tests/clients/train_cooper.py --steps 2 -o cooper.ledger -- --optimizer alt
    memledger compare tests/clients/train_cooper.py -p 'checkpoint:blocks.*' -- --optimizer sim

`--optimizer`: `sim` (`SimultaneousOptimizer`: one forward, both Lagrangians' backward,
primal and dual step), `alt` (`AlternatingPrimalDualOptimizer`: primal step, then the
violations again at the new point under no_grad, then the dual step; `--violations` gives
the CMP a `compute_violations` that only runs the constraint), `dual-primal`
(`AlternatingDualPrimalOptimizer`: the dual step first), `extra`
(`ExtrapolationConstrainedOptimizer` with `ExtraSGD` / `ExtraAdam`: two forwards and
backwards a roll, the extrapolation step keeping a copy of the parameters that the step
then puts back under `p.data`).

`--constraint`: `rate` (the mean predicted probability of class 1 at most 0.3, a rate
constraint), `norm` (the squared norm of the parameters at most 1.0).
`--formulation`: `lagrangian` or `augmented` (`AugmentedLagrangian` with a
`DensePenaltyCoefficient`). `--primal adam|sgd`, `--accum N` is not offered: a roll is one
step by construction.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import cooper


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.gelu(self.fc(self.norm(x)))


class Classifier(nn.Module):
    def __init__(self, dim_in: int, dim: int, depth: int, classes: int) -> None:
        super().__init__()
        self.embed = nn.Linear(dim_in, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class RateConstrained(cooper.ConstrainedMinimizationProblem):
    """Cross-entropy under one inequality constraint g(x) <= 0."""

    def __init__(self, kind: str, formulation: str) -> None:
        super().__init__()
        multiplier = cooper.multipliers.DenseMultiplier(num_constraints=1)
        if formulation == "augmented":
            self.constraint = cooper.Constraint(
                constraint_type=cooper.ConstraintType.INEQUALITY,
                formulation_type=cooper.formulations.AugmentedLagrangian,
                multiplier=multiplier,
                penalty_coefficient=cooper.penalty_coefficients.DensePenaltyCoefficient(
                    init=torch.tensor([1.0])))
        else:
            self.constraint = cooper.Constraint(
                constraint_type=cooper.ConstraintType.INEQUALITY,
                formulation_type=cooper.formulations.Lagrangian, multiplier=multiplier)
        self.kind = kind

    def violation(self, model: nn.Module, logits: torch.Tensor) -> torch.Tensor:
        if self.kind == "rate":
            return (logits.softmax(-1)[:, 1].mean() - 0.3).reshape(1)
        return (sum(p.pow(2).sum() for p in model.parameters()) - 1.0).reshape(1)

    def compute_cmp_state(self, model, inputs, targets) -> cooper.CMPState:
        logits = model(inputs)
        loss = F.cross_entropy(logits, targets)
        state = cooper.ConstraintState(violation=self.violation(model, logits))
        return cooper.CMPState(loss=loss, observed_constraints={self.constraint: state})


class ViolationsToo(RateConstrained):
    def compute_violations(self, model, inputs, targets) -> cooper.CMPState:
        logits = model(inputs)
        state = cooper.ConstraintState(violation=self.violation(model, logits))
        return cooper.CMPState(observed_constraints={self.constraint: state})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--optimizer", default="sim", choices=["sim", "alt", "dual-primal", "extra"])
    p.add_argument("--constraint", default="rate", choices=["rate", "norm"])
    p.add_argument("--formulation", default="lagrangian", choices=["lagrangian", "augmented"])
    p.add_argument("--primal", default="adam", choices=["adam", "sgd"])
    p.add_argument("--violations", action="store_true")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)

    model = Classifier(8, args.dim, args.depth, 3)
    cmp = (ViolationsToo if args.violations else RateConstrained)(args.constraint,
                                                                   args.formulation)
    optim = cooper.optim
    if args.optimizer == "extra":
        extra = optim.ExtraAdam if args.primal == "adam" else optim.ExtraSGD
        primal = extra(model.parameters(), lr=1e-3)
        dual = optim.ExtraSGD(cmp.dual_parameters(), lr=1e-2, maximize=True)
        cooper_opt = optim.ExtrapolationConstrainedOptimizer(
            cmp=cmp, primal_optimizers=primal, dual_optimizers=dual)
    else:
        primal = (torch.optim.Adam(model.parameters(), lr=1e-3) if args.primal == "adam"
                  else torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9))
        dual = torch.optim.SGD(cmp.dual_parameters(), lr=1e-2, maximize=True)
        kind = {"sim": optim.SimultaneousOptimizer,
                "alt": optim.AlternatingPrimalDualOptimizer,
                "dual-primal": optim.AlternatingDualPrimalOptimizer}[args.optimizer]
        cooper_opt = kind(cmp=cmp, primal_optimizers=primal, dual_optimizers=dual)

    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x = torch.randn(args.batch, 8, generator=gen)
        y = torch.randint(0, 3, (args.batch,), generator=gen)
        batch = {"model": model, "inputs": x, "targets": y}
        if args.optimizer == "alt":
            out = cooper_opt.roll(compute_cmp_state_kwargs=batch,
                                  compute_violations_kwargs=batch)
        else:
            out = cooper_opt.roll(compute_cmp_state_kwargs=batch)
        print(f"step {step} loss {out.loss.item():.4f} "
              f"multiplier {cmp.constraint.multiplier.weight.item():.4f}")


if __name__ == "__main__":
    main()
