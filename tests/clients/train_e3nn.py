"""An E(3)-equivariant interatomic potential trained with e3nn, as its users write one (the
e3nn "gate points" models, NequIP-style): atom types embedded by an `o3.Linear`, edges from
a radius graph (`torch.cdist`), their directions in spherical harmonics
(`o3.spherical_harmonics`) and lengths in a radial basis (`soft_one_hot_linspace` under a
smooth cutoff), then `blocks.*` of interactions: an `o3.TensorProduct` with per-edge
weights from a radial MLP (`e3nn.nn.FullyConnectedNet`), messages summed onto atoms with
plain `index_add_`, a self-connection `o3.FullyConnectedTensorProduct` with the atom types,
and a `Gate` nonlinearity; an `o3.Linear` readout to one scalar per atom, summed per
structure. Random point clouds, targets from a pair potential E = sum_{i<j} exp(-r_ij).

Modes (`--mode`):

- `energy`: energy regression, MSE, Adam.
- `forces`: forces = -autograd.grad(energy, pos, create_graph=True); the loss weighs
  energy and forces (a second-order loop: the backward runs through the force graph).
- `batchnorm`: an `e3nn.nn.BatchNorm` over the irreps in each block (running statistics
  buffers, per-irrep norms).
- `network`: the library's own `e3nn.nn.models.gate_points_2101.Network` (blocks under
  `layers.*`, data handed in as a dict, its own naive `radius_graph` and `scatter`).

`--forces` adds the forces' loss to `batchnorm` and `network`.

`--jit-mode eager|script`: e3nn's codegen'd tensor products (torch.fx GraphModules,
`_compiled_main_left_right`) run as they are or TorchScript'd
(`e3nn.set_optimization_defaults(jit_mode=...)`); `--compile` hands the model to
`e3nn.util.jit.compile` (TorchScript, by each module's `@compile_mode`: `torch.jit.trace` of
each activation's `normalize2mom`). `--dtype float64` as molecular-dynamics potentials often
train. e3nn sizes each activation's normalisation from 1,000,000 float64 samples at
set-up (three 7.6 MiB vectors live at once), which outweighs a tiny model's step; the
tests take `--norm-samples 1000`. Tiny, seeded, nothing downloaded.

    python tests/clients/train_e3nn.py --steps 3 --mode forces
    memledger trace tests/clients/train_e3nn.py --steps 3 -o e3.ledger -- --mode forces
"""

import argparse
import math

import torch
from torch import nn

import e3nn
from e3nn import o3
from e3nn.math import soft_one_hot_linspace
from e3nn.nn import BatchNorm, FullyConnectedNet, Gate

p = argparse.ArgumentParser()
p.add_argument("--mode", default="energy", choices=["energy", "forces", "batchnorm", "network"])
p.add_argument("--forces", action="store_true", help="with --mode batchnorm or network: forces too")
p.add_argument("--steps", type=int, default=4)
p.add_argument("--graphs", type=int, default=4, help="structures per batch")
p.add_argument("--atoms", type=int, default=10, help="atoms per structure")
p.add_argument("--mul", type=int, default=8, help="multiplicity of each hidden irrep")
p.add_argument("--layers", type=int, default=2)
p.add_argument("--lmax", type=int, default=2)
p.add_argument("--jit-mode", default="eager", choices=["eager", "script"])
p.add_argument("--compile", action="store_true", help="e3nn.util.jit.compile the model")
p.add_argument("--dtype", default="float32", choices=["float32", "float64"],
               help="float64 as molecular-dynamics potentials often train")
p.add_argument("--norm-samples", type=int, default=0,
               help="samples of e3nn's normalisation of each activation (0: e3nn's own "
                    "1,000,000, three float64 vectors of 7.6 MiB at set-up, which outweigh a "
                    "tiny model's step; the tests take fewer)")
args = p.parse_args()

if args.norm_samples:
    import e3nn.math._normalize_activation as _norm

    def _moment(f, n, dtype=None, device=None, _samples=args.norm_samples):
        z = torch.randn(_samples, generator=torch.Generator().manual_seed(0), dtype=dtype)
        return f(z).pow(n).mean()
    _norm.moment = _moment

e3nn.set_optimization_defaults(jit_mode=args.jit_mode)
torch.set_default_dtype(getattr(torch, args.dtype))
torch.manual_seed(0)

R_MAX = 2.5          # cutoff radius (box of side 3)
N_BASIS = 8          # radial basis functions
N_TYPES = 3          # atom types, one-hot
AVG_NEIGHBORS = 6.0


def radius_graph(pos, batch, r_max):
    """Edges i -> j within r_max, inside one structure (no torch_cluster needed)."""
    r = torch.cdist(pos, pos)
    src, dst = ((r < r_max) & (r > 0) & (batch[:, None] == batch[None, :])).nonzero().T
    return src, dst


def smooth_cutoff(x):
    u = 2 * (x - 1)
    y = (math.pi * u).cos().neg().add(1).div(2)
    return torch.where(u > 0, torch.zeros_like(y), torch.where(u < -1, torch.ones_like(y), y))


class Interaction(nn.Module):
    """One message-passing block: a tensor product of neighbours' features with the edges'
    spherical harmonics, weighted per edge by a radial MLP, then a Gate."""

    def __init__(self, irreps_in, irreps_hidden, irreps_sh, irreps_attr, batchnorm=False):
        super().__init__()
        irreps_in, irreps_hidden = o3.Irreps(irreps_in), o3.Irreps(irreps_hidden)
        scalars = o3.Irreps([(m, ir) for m, ir in irreps_hidden if ir.l == 0])
        gated = o3.Irreps([(m, ir) for m, ir in irreps_hidden if ir.l > 0])
        self.gate = Gate(scalars, [torch.nn.functional.silu], f"{gated.num_irreps}x0e",
                         [torch.sigmoid], gated)
        irreps_out = self.gate.irreps_in
        self.lin1 = o3.Linear(irreps_in, irreps_in)
        mid, instructions = [], []
        for i, (mul, ir_in) in enumerate(irreps_in):
            for j, (_, ir_edge) in enumerate(irreps_sh):
                for ir_out in ir_in * ir_edge:
                    if ir_out in irreps_out:
                        instructions.append((i, j, len(mid), "uvu", True))
                        mid.append((mul, ir_out))
        mid, perm, _ = o3.Irreps(mid).sort()
        instructions = [(a, b, perm[c], m, t) for a, b, c, m, t in instructions]
        self.tp = o3.TensorProduct(irreps_in, irreps_sh, mid, instructions,
                                   shared_weights=False, internal_weights=False)
        self.fc = FullyConnectedNet([N_BASIS, 16, self.tp.weight_numel], torch.nn.functional.silu)
        self.lin2 = o3.Linear(mid.simplify(), irreps_out)
        self.sc = o3.FullyConnectedTensorProduct(irreps_in, irreps_attr, irreps_out)
        self.norm = BatchNorm(irreps_out) if batchnorm else None
        self.irreps_out = self.gate.irreps_out

    def forward(self, x, attr, src, dst, sh, emb):
        w = self.fc(emb)                                           # (E, weight_numel)
        msg = self.tp(self.lin1(x)[src], sh, w)                    # (E, mid.dim)
        agg = torch.zeros(x.shape[0], msg.shape[1], dtype=msg.dtype).index_add_(0, dst, msg)
        out = self.lin2(agg / AVG_NEIGHBORS ** 0.5) + self.sc(x, attr)
        if self.norm is not None:
            out = self.norm(out)
        return self.gate(out)


class Potential(nn.Module):
    def __init__(self, mul, layers, lmax, batchnorm=False):
        super().__init__()
        self.irreps_sh = o3.Irreps.spherical_harmonics(lmax)
        attr = o3.Irreps(f"{N_TYPES}x0e")
        hidden = o3.Irreps([(mul, (l, p)) for l in range(lmax + 1) for p in (1, -1)
                            if p == (-1) ** l])
        self.embed = o3.Linear(attr, o3.Irreps(f"{mul}x0e"))
        irreps = o3.Irreps(f"{mul}x0e")
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            block = Interaction(irreps, hidden, self.irreps_sh, attr, batchnorm)
            self.blocks.append(block)
            irreps = block.irreps_out
        self.readout = o3.Linear(irreps, "0e")

    def forward(self, pos, attr, batch, n_graphs: int):
        src, dst = radius_graph(pos, batch, R_MAX)
        vec = pos[src] - pos[dst]
        sh = o3.spherical_harmonics(self.irreps_sh, vec, normalize=True, normalization="component")
        length = vec.norm(dim=1)
        emb = soft_one_hot_linspace(length, 0.0, R_MAX, N_BASIS, basis="smooth_finite",
                                    cutoff=True).mul(N_BASIS ** 0.5)
        sh = smooth_cutoff(length / R_MAX)[:, None] * sh
        x = self.embed(attr)
        for block in self.blocks:
            x = block(x, attr, src, dst, sh, emb)
        per_atom = self.readout(x).squeeze(-1)
        return torch.zeros(n_graphs, dtype=per_atom.dtype).index_add_(0, batch, per_atom)


def pair_potential(pos):
    """E = sum_{i<j} exp(-r_ij) and its forces, per structure: pos (S, n, 3)."""
    d = pos[:, :, None, :] - pos[:, None, :, :]                    # (S, n, n, 3)
    r = d.norm(dim=-1) + torch.eye(pos.shape[1])
    e = torch.exp(-r) * (1 - torch.eye(pos.shape[1]))
    forces = (e[..., None] * d / r[..., None]).sum(2)             # -dE/dpos
    return e.sum((1, 2)) / 2, forces


# a small data set of structures, built once (as a loaded data set would be)
g = torch.Generator().manual_seed(1)
n_structures = 8 * args.graphs
all_pos = torch.rand(n_structures, args.atoms, 3, generator=g) * 3.0
all_types = torch.randint(0, N_TYPES, (n_structures, args.atoms), generator=g)
all_energy, all_forces = pair_potential(all_pos)

if args.mode == "network":
    from e3nn.nn.models.gate_points_2101 import Network
    model = Network(irreps_in=None, irreps_hidden=f"{args.mul}x0e + {args.mul}x0o + "
                    f"{args.mul}x1e + {args.mul}x1o", irreps_out="0e",
                    irreps_node_attr=f"{N_TYPES}x0e",
                    irreps_edge_attr=o3.Irreps.spherical_harmonics(args.lmax),
                    layers=args.layers, max_radius=R_MAX, number_of_basis=N_BASIS,
                    radial_layers=1, radial_neurons=16, num_neighbors=AVG_NEIGHBORS,
                    num_nodes=float(args.atoms))
else:
    model = Potential(args.mul, args.layers, args.lmax, batchnorm=args.mode == "batchnorm")
if args.compile:
    from e3nn.util.jit import compile as e3nn_compile
    model = e3nn_compile(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
forces_weight = 10.0

forces_too = args.mode == "forces" or args.forces
for step in range(args.steps):
    idx = torch.randperm(n_structures, generator=g)[:args.graphs]
    pos = all_pos[idx].reshape(-1, 3)
    attr = torch.nn.functional.one_hot(all_types[idx].reshape(-1), N_TYPES).to(pos.dtype)
    batch = torch.arange(args.graphs).repeat_interleave(args.atoms)
    if forces_too:
        pos.requires_grad_(True)
    if args.mode == "network":
        energy = model({"pos": pos, "z": attr, "batch": batch}).squeeze(-1)
    else:
        energy = model(pos, attr, batch, args.graphs)
    loss = (energy - all_energy[idx]).pow(2).mean()
    if forces_too:
        forces = -torch.autograd.grad(energy.sum(), pos, create_graph=True)[0]
        loss = loss + forces_weight * (forces - all_forces[idx].reshape(-1, 3)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, round(loss.item(), 5))
