"""PyPose (pypose) as its docs and examples write it: LieTensor parameters (a Tensor subclass
carrying its `ltype`, `pp.Parameter(pp.randn_SE3(...))`) trained through `Exp` / `Log` /
`Act` / `Inv`, and second-order optimizers that build their own Jacobians. Seeded, tiny,
nothing downloaded.

    python tests/clients/train_pypose.py --steps 3 --mode net
    memledger trace tests/clients/train_pypose.py --steps 2 -o pp.ledger -- --mode pgo
    memledger compare tests/clients/train_pypose.py -p 'checkpoint:blocks.*' -- --mode net

Modes (`--mode`):

- `net`: a point-cloud registration net: `blocks` of (a Linear + SiLU residual, and an
  SE3 LieTensor parameter that moves the block's points by `pose.Act`); the loss compares
  the moved points with targets and the relative pose `(pose.Inv() @ ref).Log()` of each
  block to an se3 target (`Exp` of a learned twist in `--twist`). Adam (`--opt sgd`: SGD).
- `pgo`: pose-graph optimization as pypose's examples/module/pgo: a `PoseGraph` module
  whose nodes are one SE3 `pp.Parameter`, edge errors `(pose.Inv() @ n1.Inv() @ n2).Log()`,
  weighted by information matrices, optimized by `pp.optim.LM` (`--solver cholesky | lstsq`,
  `--strategy trust | adaptive | constant`, `--kernel huber`) with a `StopOnPlateau`
  scheduler stepped by the loss, or `pp.optim.GN` (`--gn`). No backward: each step builds
  the Jacobian itself (`torch.autograd.functional.jacobian`, vectorized).
- `imu`: a learned IMU corrector (a small MLP over raw gyro / acc windows) in front of
  `pp.module.IMUPreintegrator`; the loss is the integrated rotation and position against a
  ground truth. Adam.

- `ekf`: a learned nonlinear system (`pp.module.NLS`: an MLP transition, a Linear
  observation) filtered by `pp.module.EKF` over a short trajectory (the filter takes the
  system's Jacobians `A`, `C` itself at each step, `torch.autograd.functional.jacobian`
  inside the forward); the loss is the filtered state against the truth, through every
  filter step. Adam.

`--accum N` (net, imu: gradient accumulation), `--validate` (net, imu: a loss under no_grad
each step).
"""

import argparse

import torch
import torch.nn as nn

import pypose as pp


class PoseBlock(nn.Module):
    """A residual MLP on point features and a pose that moves the points."""

    def __init__(self, dim: int, twist: bool) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.pose = pp.Parameter(pp.randn_SE3())
        self.twist = pp.Parameter(pp.randn_se3() * 0.1) if twist else None

    def forward(self, feats, points):
        feats = feats + self.mlp(feats)
        pose = self.pose if self.twist is None else self.twist.Exp() @ self.pose
        points = pose.unsqueeze(-2).Act(points) + feats[..., :3] * 0.01  # (B, N, 3)
        return feats, points, pose


class RegNet(nn.Module):
    def __init__(self, dim: int, depth: int, twist: bool) -> None:
        super().__init__()
        self.embed = nn.Linear(3, dim)
        self.blocks = nn.ModuleList(PoseBlock(dim, twist) for _ in range(depth))
        self.ref = pp.identity_SE3()

    def forward(self, points):
        feats = self.embed(points)
        rel = []
        for blk in self.blocks:
            feats, points, pose = blk(feats, points)
            rel.append((pose.Inv() @ self.ref).Log().tensor())  # (7,) SE3 -> (6,) se3
        return points, torch.stack(rel)


class PoseGraph(nn.Module):
    """pypose examples/module/pgo/pgo.py's model."""

    def __init__(self, nodes) -> None:
        super().__init__()
        self.nodes = pp.Parameter(nodes)

    def forward(self, edges, poses):
        node1 = self.nodes[edges[..., 0]]
        node2 = self.nodes[edges[..., 1]]
        error = poses.Inv() @ node1.Inv() @ node2
        return error.Log().tensor()


class IMUCorrector(nn.Module):
    """pypose examples/module/imu/imu_corrector.py, smaller."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(6, size), nn.GELU(), nn.Linear(size, 6))
        self.imu = pp.module.IMUPreintegrator(reset=True, prop_cov=False)

    def forward(self, dt, gyro, acc, rot, init_state):
        corr = self.net(torch.cat([gyro, acc], -1))
        gyro, acc = gyro + corr[..., :3] * 0.1, acc + corr[..., 3:] * 0.1
        return self.imu(dt, gyro, acc, rot=rot, init_state=init_state)


class LearnedDynamics(pp.module.NLS):
    """A nonlinear system whose transition is a small MLP (pypose's NLS: `A`, `B`, `C`, `D`
    are Jacobians it takes itself at the reference point), observed through a Linear."""

    def __init__(self, n: int, size: int) -> None:
        super().__init__()
        self.f = nn.Sequential(nn.Linear(n + 1, size), nn.Tanh(), nn.Linear(size, n))
        self.g = nn.Linear(n, n)

    def state_transition(self, state, input, t=None):
        return state + 0.1 * self.f(torch.cat([state, input], -1))

    def observation(self, state, input, t=None):
        return self.g(state)


def run_ekf(args) -> None:
    n, T = 4, args.frames
    model = LearnedDynamics(n, args.dim)
    ekf = pp.module.EKF(model, Q=torch.eye(n) * 1e-2, R=torch.eye(n) * 1e-2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        truth = torch.cumsum(torch.randn(T, n) * 0.1, 0)
        obs = truth + torch.randn(T, n) * 0.1
        u = torch.randn(T, 1)
        x, P = torch.zeros(n), torch.eye(n)
        loss = 0.0
        for t in range(T):
            x, P = ekf(x, obs[t], u[t], P)
            loss = loss + (x - truth[t]).square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"loss {loss.item():.4f}")


def run_net(args) -> None:
    model = RegNet(args.dim, args.depth, args.twist)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3) if args.opt == "adam" else \
        torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    target = pp.randn_SE3()
    for _ in range(args.steps):
        for _ in range(args.accum):
            pts = torch.randn(args.batch, args.points, 3)
            goal = target.unsqueeze(-2).Act(pts)
            out, rel = model(pts)
            loss = (out - goal).square().mean() + rel.square().mean() * 0.1
            (loss / args.accum).backward()
        opt.step()
        opt.zero_grad()
        if args.validate:
            with torch.no_grad():
                out, _ = model(torch.randn(args.batch, args.points, 3))
                float(out.square().mean())
        print(f"loss {loss.item():.4f}")


def run_pgo(args) -> None:
    n = args.nodes
    truth = pp.randn_SE3(n, sigma=1.0)
    ring = torch.arange(n)
    edges = torch.stack([torch.cat([ring[:-1], ring[:n - 2]]),
                         torch.cat([ring[1:], ring[2:]])], -1)  # (E, 2): odometry and skips
    poses = truth[edges[:, 0]].Inv() @ truth[edges[:, 1]]
    poses = poses @ pp.randn_SE3(len(edges), sigma=0.05)
    infos = torch.eye(6).repeat(len(edges), 1, 1)
    init = truth @ pp.randn_SE3(n, sigma=0.2)
    graph = PoseGraph(init)
    solver = pp.optim.solver.Cholesky() if args.solver == "cholesky" else \
        pp.optim.solver.LSTSQ()
    kernel = pp.optim.kernel.Huber() if args.kernel == "huber" else None
    if args.gn:
        optimizer = pp.optim.GN(graph, solver=pp.optim.solver.PINV(), kernel=kernel)
    else:
        strategy = {"trust": pp.optim.strategy.TrustRegion(radius=1e4),
                    "adaptive": pp.optim.strategy.Adaptive(damping=1e-6),
                    "constant": pp.optim.strategy.Constant(damping=1e-4)}[args.strategy]
        optimizer = pp.optim.LM(graph, solver=solver, strategy=strategy, kernel=kernel,
                                min=1e-6, vectorize=True)
    scheduler = pp.optim.scheduler.StopOnPlateau(optimizer, steps=args.steps, patience=3,
                                                  decreasing=1e-6)
    for _ in range(args.steps):
        loss = optimizer.step(input=(edges, poses), weight=infos)
        scheduler.step(loss)
        print(f"loss {loss.item():.6f}")


def run_imu(args) -> None:
    B, F = args.batch, args.frames
    model = IMUCorrector(args.dim)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        for _ in range(args.accum):
            dt = torch.full((B, F, 1), 0.01)
            gyro, acc = torch.randn(B, F, 3) * 0.1, torch.randn(B, F, 3) + \
                torch.tensor([0.0, 0.0, 9.81])
            rot = pp.randn_SO3(B, F, sigma=0.1)
            init = {"pos": torch.zeros(B, 1, 3), "rot": pp.identity_SO3(B, 1),
                    "vel": torch.zeros(B, 1, 3)}
            gt_rot, gt_pos = pp.randn_SO3(B, sigma=0.1), torch.randn(B, 3) * 0.01
            state = model(dt, gyro, acc, rot, init)
            rot_err = (gt_rot.Inv() @ state["rot"][:, -1]).Log().tensor()
            loss = rot_err.square().mean() + (state["pos"][:, -1] - gt_pos).square().mean()
            (loss / args.accum).backward()
        opt.step()
        opt.zero_grad()
        if args.validate:
            with torch.no_grad():
                float(model(dt, gyro, acc, rot, init)["pos"].sum())
        print(f"loss {loss.item():.4f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="net", choices=["net", "pgo", "imu", "ekf"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--points", type=int, default=32)
    p.add_argument("--twist", action="store_true")
    p.add_argument("--opt", default="adam", choices=["adam", "sgd"])
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--solver", default="cholesky", choices=["cholesky", "lstsq"])
    p.add_argument("--strategy", default="trust", choices=["trust", "adaptive", "constant"])
    p.add_argument("--kernel", default="none", choices=["none", "huber"])
    p.add_argument("--gn", action="store_true")
    p.add_argument("--frames", type=int, default=10)
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--validate", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    {"net": run_net, "pgo": run_pgo, "imu": run_imu, "ekf": run_ekf}[args.mode](args)


if __name__ == "__main__":
    main()
