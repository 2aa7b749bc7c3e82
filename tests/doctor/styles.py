"""Correct loops in styles people use, each with a pattern that looks like a bug to a naive
check. No finding on any of them.

    python styles.py --loop tbptt      # truncated BPTT: hidden.detach() between chunks (not a
                                       # cut: the parameters all get gradients)
    python styles.py --loop rl         # actor-critic: retain_graph=True, two backward passes,
                                       # one step (not a loss_not_divided: two objectives)
    python styles.py --loop gp         # WGAN-GP: create_graph=True gradient penalty, 2 critic
                                       # steps per generator step
    python styles.py --loop queue      # MoCo: momentum key encoder, queue of detached keys
    python styles.py --loop groups     # param groups with their own LR and a frozen group
    python styles.py --loop topzero    # zero_grad(set_to_none=False) at the top of the loop,
                                       # accumulation every 2, total += loss.item()
    python styles.py --loop maml       # MAML: inner steps with create_graph, functional_call
    python styles.py --loop gan        # generator step first (the discriminator frozen), then
                                       # the discriminator's on the kept `fake.detach()`
                                       # (Lightning's GAN recipe): two training steps, and
                                       # `fake` keeps its spent graph across the second
    python styles.py --loop fgsm       # adversarial training ("fast is better than free"):
                                       # a backward for the perturbation's gradient, the
                                       # parameters' zeroed before the training backward
    python styles.py --loop multitask  # one trunk forward, a head per task, one
                                       # backward per head (retaining the graph but the
                                       # last: tests/doctor/retained.py --heads), one step: the
                                       # parts of one objective, not micro-batches (not a
                                       # loss_not_divided: the backward passes share a forward)
"""
import copy
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

LOOP = sys.argv[sys.argv.index("--loop") + 1]
torch.manual_seed(0)
if LOOP == "tbptt":
    emb, rnn, out = nn.Embedding(20, 8), nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 20)
    params = [*emb.parameters(), *rnn.parameters(), *out.parameters()]
    opt = torch.optim.Adam(params, lr=1e-3)
    data, hidden = torch.randint(0, 20, (4, 41)), None
    for i in range(0, 40, 8):
        x, y = data[:, i:i + 8], data[:, i + 1:i + 9]
        if hidden is not None:
            hidden = tuple(h.detach() for h in hidden)
        o, hidden = rnn(emb(x), hidden)
        loss = F.cross_entropy(out(o).reshape(-1, 20), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
elif LOOP == "rl":
    trunk, actor, critic = nn.Sequential(nn.Linear(6, 32), nn.Tanh()), nn.Linear(32, 4), \
        nn.Linear(32, 1)
    params = [*trunk.parameters(), *actor.parameters(), *critic.parameters()]
    opt = torch.optim.Adam(params, lr=3e-4)
    for episode in range(4):
        h = trunk(torch.randn(16, 6))
        dist = torch.distributions.Categorical(logits=actor(h))
        a, ret = dist.sample(), torch.randn(16)
        v = critic(h).squeeze(-1)
        policy_loss = -(dist.log_prob(a) * (ret - v).detach()).mean()
        value_loss = F.mse_loss(v, ret)
        opt.zero_grad()
        policy_loss.backward(retain_graph=True)
        value_loss.backward()
        nn.utils.clip_grad_norm_(params, 0.5)
        opt.step()
elif LOOP == "gp":
    G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    og = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
    od = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.0, 0.9))
    for it in range(4):
        real = torch.randn(8, 8)
        for _ in range(2):
            fake = G(torch.randn(8, 4)).detach()
            eps = torch.rand(8, 1)
            mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
            grad, = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)
            penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
            loss_d = D(fake).mean() - D(real).mean() + 10 * penalty
            od.zero_grad()
            loss_d.backward()
            od.step()
        loss_g = -D(G(torch.randn(8, 4))).mean()
        og.zero_grad()
        loss_g.backward()
        og.step()
elif LOOP == "queue":
    q_enc = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16))
    k_enc = copy.deepcopy(q_enc).requires_grad_(False)
    opt = torch.optim.SGD(q_enc.parameters(), lr=0.03, momentum=0.9, weight_decay=1e-4)
    queue = F.normalize(torch.randn(64, 16), dim=1)
    for step in range(4):
        x = torch.randn(8, 10)
        q = F.normalize(q_enc(x + 0.1 * torch.randn_like(x)), dim=1)
        with torch.no_grad():
            for pk, pq in zip(k_enc.parameters(), q_enc.parameters()):
                pk.mul_(0.99).add_(pq, alpha=0.01)
            k = F.normalize(k_enc(x + 0.1 * torch.randn_like(x)), dim=1)
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.t()], 1) / 0.07
        loss = F.cross_entropy(logits, torch.zeros(8, dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
        queue = torch.cat([k, queue])[:64]
elif LOOP == "groups":
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                          nn.Linear(16, 3))
    model[0].requires_grad_(False)
    opt = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 1e-5},
                             {"params": model[2].parameters(), "lr": 1e-4},
                             {"params": model[4].parameters(), "lr": 1e-3, "weight_decay": 0.0}])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, [lambda s: 1.0, lambda s: 0.9 ** s,
                                                    lambda s: 1.0])
    for step in range(4):
        loss = F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 3, (8,)))
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
elif LOOP == "topzero":
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    total = 0.0
    for i in range(8):
        if i % 2 == 0:
            opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(torch.randn(8, 8)), torch.randint(0, 2, (8,))) / 2
        loss.backward()
        if i % 2 == 1:
            opt.step()
        total += loss.item()
elif LOOP == "maml":
    model = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 1))
    meta = torch.optim.Adam(model.parameters(), lr=1e-3)
    for it in range(4):
        meta.zero_grad()
        for task in range(2):
            a = torch.rand(1) * 4
            xs, xq = torch.rand(10, 1) * 10 - 5, torch.rand(10, 1) * 10 - 5
            fast = dict(model.named_parameters())
            for _ in range(2):
                inner = F.mse_loss(functional_call(model, fast, (xs,)), a * torch.sin(xs))
                grads = torch.autograd.grad(inner, list(fast.values()), create_graph=True)
                fast = {k: v - 0.01 * g for (k, v), g in zip(fast.items(), grads)}
            outer = F.mse_loss(functional_call(model, fast, (xq,)), a * torch.sin(xq)) / 2
            outer.backward()
        meta.step()
elif LOOP == "gan":
    G = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 16))
    D = nn.Sequential(nn.Linear(16, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
    opt_g, opt_d = torch.optim.Adam(G.parameters()), torch.optim.Adam(D.parameters())
    for it in range(4):
        real, ones, zeros = torch.randn(16, 16), torch.ones(16, 1), torch.zeros(16, 1)
        D.requires_grad_(False)   # Lightning's toggle_optimizer(opt_g): the step is G's alone
        fake = G(torch.randn(16, 8))
        F.binary_cross_entropy_with_logits(D(fake), ones).backward()
        opt_g.step()
        opt_g.zero_grad()
        D.requires_grad_(True)
        d_loss = (F.binary_cross_entropy_with_logits(D(real), ones)
                  + F.binary_cross_entropy_with_logits(D(fake.detach()), zeros)) / 2
        d_loss.backward()
        opt_d.step()
        opt_d.zero_grad()
elif LOOP == "fgsm":
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    epsilon, alpha = 0.1, 0.125
    for it in range(4):
        x, y = torch.randn(4, 32), torch.randint(0, 4, (4,))
        delta = torch.zeros_like(x).uniform_(-epsilon, epsilon)
        delta.requires_grad = True
        F.cross_entropy(model(x + delta), y).backward()
        delta = torch.clamp(delta + alpha * torch.sign(delta.grad), -epsilon, epsilon).detach()
        loss = F.cross_entropy(model(x + delta), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
elif LOOP == "multitask":
    trunk = nn.Sequential(nn.Linear(32, 64), nn.ReLU())
    heads = nn.ModuleList([nn.Linear(64, 4) for _ in range(3)])
    opt = torch.optim.AdamW([*trunk.parameters(), *heads.parameters()], lr=1e-3)
    for it in range(4):
        x, ys = torch.randn(4, 32), [torch.randint(0, 4, (4,)) for _ in heads]
        opt.zero_grad()
        feat = trunk(x)
        for i, (head, y) in enumerate(zip(heads, ys)):
            loss = F.cross_entropy(head(feat), y)
            loss.backward(retain_graph=i < len(heads) - 1)   # the last one frees the trunk
        opt.step()
