"""An ANI neural-network potential trained on energies and forces, as torchani's
`nnp_training_force.py` tutorial trains it: an `AEVComputer` built from constants (the
ANI-1x radial and angular terms, fewer shifts), one `AtomicNetwork` per element in
`ANINetworks` (H, C, N, O: Linear + CELU(0.1)), self energies taken off the targets by an
`EnergyShifter`, the forces `-dE/dcoords` by `torch.autograd.grad(..., create_graph=True)`,
the loss `energy_loss + force_coefficient * force_loss`, and the tutorial's split of the
parameters: `AdamW` for the weights (a weight decay per layer: none on the first and last,
1e-5 / 1e-6 between), `SGD` for the biases, both stepped after one backward. Nothing is
downloaded: a few small molecules of random elements (padded with -1) at random
coordinates, their energies and forces a toy pair potential. Seeded.

    python tests/clients/train_torchani.py --steps 3
    memledger trace tests/clients/train_torchani.py --steps 2 -o ani.ledger
    memledger compare tests/clients/train_torchani.py -p 'checkpoint:networks.atomics.*'

Modes (`--mode`): `forces` (the tutorial's loss), `energy` (energies alone,
`nnp_training.py`: one backward pass).
"""

import argparse
import math
import os

import torch

os.environ.setdefault("TORCHANI_NO_WARN_EXTENSIONS", "1")   # no CUDA extensions on CPU
import torchani  # noqa: E402
from torchani.aev import AEVComputer  # noqa: E402
from torchani.nn import ANINetworks, AtomicNetwork, TightCELU  # noqa: E402

SYMBOLS = ("H", "C", "N", "O")
# self energies (Hartree) of H, C, N, O, as ANI-1x's
SELF_ENERGIES = [-0.600952980000, -38.08316124000, -54.70775770000, -75.19446356000]


def aev_computer() -> AEVComputer:
    """ANI-1x's constants, with fewer radial and angular shifts (a small AEV)."""
    return AEVComputer.from_constants(
        radial_cutoff=5.2, angular_cutoff=3.5,
        radial_eta=16.0, radial_shifts=[0.9, 1.9, 2.9, 3.9],
        angular_eta=8.0, angular_zeta=32.0, angular_shifts=[0.9, 2.2],
        sections=[0.19634954, 1.7671459], num_species=len(SYMBOLS))


class Potential(torch.nn.Module):
    """`torchani.nn.Sequential(aev_computer, nn)` of the tutorial, as a plain module."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.aev = aev_computer()
        dims = (self.aev.out_dim, 2 * width, width, width // 2, 1)
        self.networks = ANINetworks(
            {s: AtomicNetwork(dims, activation=TightCELU(), bias=True) for s in SYMBOLS})

    def forward(self, species: torch.Tensor, coordinates: torch.Tensor) -> torch.Tensor:
        return self.networks(species, self.aev(species, coordinates))


def dataset(n: int, atoms: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """`n` molecules of 3..`atoms` atoms (padded with -1), random elements at random
    coordinates (Angstrom), energies and forces of a toy Morse-like pair potential."""
    species = torch.randint(0, len(SYMBOLS), (n, atoms), generator=gen)
    sizes = torch.randint(3, atoms + 1, (n,), generator=gen)
    species[torch.arange(atoms)[None, :] >= sizes[:, None]] = -1
    coordinates = torch.randn(n, atoms, 3, generator=gen) * 1.2
    coordinates.requires_grad_(True)
    real = (species >= 0).to(torch.float32)
    d = torch.cdist(coordinates, coordinates) + torch.eye(atoms)
    pair = real[:, :, None] * real[:, None, :] * (1 - torch.eye(atoms))
    energy = (pair * (1 - torch.exp(-(d - 1.2))) ** 2).sum(dim=(1, 2)) / 2 * 0.01
    forces = -torch.autograd.grad(energy.sum(), coordinates)[0]
    shifter = torchani.EnergyShifter(SELF_ENERGIES)
    energies = (energy.double() + shifter.sae(species)).float()
    # the tutorial's `subtract_self_energies`: the networks fit what the elements do not
    energies = energies - shifter.sae(species).float()
    # stored in float64, as the tutorial's data set holds them
    return species, coordinates.detach().double(), energies.detach().double(), \
        forces.detach().double()


def optimizers(model: Potential) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    """The tutorial's split: AdamW over the weights (decay per layer), SGD over the biases."""
    decay = [None, 1e-5, 1e-6, None]
    nets = [model.networks[s] for s in SYMBOLS]
    groups = []
    for i, wd in enumerate(decay):
        for net in nets:
            layer = net[i]
            groups.append({"params": [layer.weight]} if wd is None
                          else {"params": [layer.weight], "weight_decay": wd})
    adamw = torch.optim.AdamW(groups, lr=1e-3, weight_decay=0.0)
    sgd = torch.optim.SGD([{"params": [net[i].bias]} for i in range(len(decay)) for net in nets],
                          lr=1e-3)
    return adamw, sgd


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="forces", choices=["forces", "energy"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--molecules", type=int, default=4, help="molecules per batch")
    p.add_argument("--atoms", type=int, default=5, help="atoms per molecule (padded)")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--force-coefficient", type=float, default=0.1)
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model = Potential(args.width)
    adamw, sgd = optimizers(model)
    mse = torch.nn.MSELoss(reduction="none")
    # the data set made (and shifted) before training, as the tutorial loads its own
    batches = [dataset(args.molecules, args.atoms, gen) for _ in range(2)]
    for step in range(args.steps):
        species, coordinates, true_energies, true_forces = batches[step % len(batches)]
        coordinates = coordinates.float().requires_grad_(args.mode == "forces")
        true_energies, true_forces = true_energies.float(), true_forces.float()
        num_atoms = (species >= 0).sum(dim=1, dtype=true_energies.dtype)
        predicted_energies = model(species, coordinates)
        energy_loss = (mse(predicted_energies, true_energies) / num_atoms.sqrt()).mean()
        loss = energy_loss
        if args.mode == "forces":
            forces = -torch.autograd.grad(predicted_energies.sum(), coordinates,
                                          create_graph=True, retain_graph=True)[0]
            force_loss = (mse(true_forces, forces).sum(dim=(1, 2)) / num_atoms).mean()
            loss = energy_loss + args.force_coefficient * force_loss
        adamw.zero_grad()
        sgd.zero_grad()
        loss.backward()
        adamw.step()
        sgd.step()
        print(f"step {step}  loss {loss.item():.6f}  rmse {math.sqrt(energy_loss.item()):.4f}")


if __name__ == "__main__":
    main()
