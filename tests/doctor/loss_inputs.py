"""A loss given what it does not take (checks `double_activation`, `broadcast_target`,
`not_log_probs`, `kl_div_mean`).

    python loss_inputs.py --bug softmax_ce      # F.cross_entropy(torch.softmax(logits, -1), y)
    python loss_inputs.py --bug softmax_module  # a model ending in nn.Softmax, nn.CrossEntropyLoss
    python loss_inputs.py --bug sigmoid_bce     # nn.BCEWithLogitsLoss()(torch.sigmoid(z), t)
    python loss_inputs.py --bug softmax_nll     # F.nll_loss(F.softmax(logits, 1), y)
    python loss_inputs.py --bug mse_broadcast   # F.mse_loss(pred (N, 1), y (N,))
    python loss_inputs.py --bug l1_module       # nn.L1Loss()(pred (N,), y (N, 1))
    python loss_inputs.py --bug huber_broadcast # F.huber_loss(pred (N, 1), y (N,))
    python loss_inputs.py --bug nll_logits      # F.nll_loss(logits, y): no log_softmax
    python loss_inputs.py --bug nll_module      # nn.NLLLoss(ignore_index=-1) on logits
    python loss_inputs.py --bug kl_probs        # F.kl_div(log_probs.exp(), soft): probabilities
    python loss_inputs.py --bug kl_logits       # F.kl_div(logits, soft)
    python loss_inputs.py --bug kl_mean         # nn.KLDivLoss() (reduction='mean') on rows
    python loss_inputs.py --bug ctc_logits      # nn.CTCLoss() on the frames' logits
    python loss_inputs.py --bug ctc_softmax     # F.ctc_loss(frames.softmax(-1), ...)
    python loss_inputs.py --bug ...  --fixed    # the same loop, the loss given what it takes

    python loss_inputs.py --form F              # correct forms that must draw nothing:
    distill (KL between two softmaxes, log_softmax input), soft_targets (cross_entropy with
    probabilities as the TARGET), smoothing (label_smoothing=0.1), log_nll (log_softmax +
    nll_loss), log_ce (log_softmax then cross_entropy), log_probs (torch.log of a softmax +
    nll_loss), bce (sigmoid + F.binary_cross_entropy), row_target (an (N, D) prediction
    against a (D,) target), scalar_target (against a 0-d target), pairwise (reduction='none'
    on a[:, None] - b[None]), lm (a language model's shifted logits, view(-1, V)), eval
    (softmax + cross_entropy under no_grad: a metric); the nll_loss inputs that are no
    log_softmax but no logits either: nll_subset (log-probabilities of 5 of the 10
    classes), nll_logsigmoid (per-class logsigmoid: rows above 1, bounded), nll_gather
    (reduction='none' as a gather of Q-values), hand_ce (nll_loss on the logits plus their
    logsumexp: the cross-entropy written by hand), hand_ce_lse_first (the logsumexp
    taken first), nll_ignore (padding rows hold raw values, ignore_index), nll_weighted
    (weight=), nll_bf16 (bfloat16 log-probabilities), nll_mixture (a mixture's
    logsumexp); kl_div: kl_log_target (log_target=True), kl_none_sum (reduction='none',
    summed by hand), kl_pointwise (a Bernoulli term per output, 'mean'); the reduction
    however passed: pairwise_legacy (reduce=False: 'none'), pairwise_positional
    (F.mse_loss(a, b, None, None, 'none')), kl_legacy_sum (size_average=False: 'sum'),
    kl_positional (F.kl_div(lp, q, None, None, 'batchmean')); ctc (F.ctc_loss on the frames'
    log_softmax, reduction='none'), ctc_bf16 (the same in bfloat16)
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

BUGS = ["softmax_ce", "softmax_module", "sigmoid_bce", "softmax_nll", "mse_broadcast",
        "l1_module", "huber_broadcast", "nll_logits", "nll_module", "kl_probs", "kl_logits",
        "kl_mean", "ctc_logits", "ctc_softmax"]
FORMS = ["distill", "soft_targets", "smoothing", "log_nll", "log_ce", "log_probs", "bce",
         "row_target", "scalar_target", "pairwise", "lm", "eval", "nll_subset",
         "nll_logsigmoid", "nll_gather", "hand_ce", "hand_ce_lse_first", "nll_ignore",
         "nll_weighted", "nll_bf16", "nll_mixture", "kl_log_target", "kl_none_sum",
         "kl_pointwise", "pairwise_legacy", "pairwise_positional", "kl_legacy_sum",
         "kl_positional", "ctc", "ctc_bf16"]
p = argparse.ArgumentParser()
p.add_argument("--bug", choices=BUGS)
p.add_argument("--form", choices=FORMS)
p.add_argument("--fixed", action="store_true")
p.add_argument("--steps", type=int, default=3)
ARGS = p.parse_args()
FIXED = ARGS.fixed
BUG = ARGS.bug or ""

torch.manual_seed(0)
N, D, C = 8, 16, 10
out_dim = 1 if "mse" in BUG or "l1" in BUG or "huber" in BUG or "bce" in BUG else C
if ARGS.form in ("row_target", "scalar_target", "pairwise"):
    out_dim = 4
layers = [nn.Linear(D, 32), nn.ReLU(), nn.Linear(32, out_dim)]
if BUG == "softmax_module" and not FIXED:
    layers.append(nn.Softmax(dim=-1))
model = nn.Sequential(*layers)
teacher = nn.Linear(D, C).requires_grad_(False)
lm_head = nn.Linear(D, C)
opt = torch.optim.Adam([*model.parameters(), *(lm_head.parameters() if ARGS.form == "lm"
                                                else ())], lr=1e-3)
criterion = {"softmax_module": nn.CrossEntropyLoss(), "sigmoid_bce": nn.BCEWithLogitsLoss(),
             "l1_module": nn.L1Loss(), "nll_module": nn.NLLLoss(ignore_index=-1),
             "kl_mean": nn.KLDivLoss(reduction="batchmean" if FIXED else "mean"),
             "ctc_logits": nn.CTCLoss()}.get(BUG)


def ctc(loss, frames: torch.Tensor, **kw) -> torch.Tensor:
    """A CTC loss over the batch's 8 rows read as 4 frames of 2 utterances (T, N, C), blank
    0, the targets' symbols 1..C-1."""
    targets = torch.tensor([[1, 2], [3, 0]])
    return loss(frames.view(4, 2, C), targets, torch.tensor([4, 4]), torch.tensor([2, 1]),
                **kw)


def loss_of(x, y, t):
    out = model(x)
    if BUG == "softmax_ce":
        probs = out if FIXED else torch.softmax(out, -1)
        return F.cross_entropy(probs, y)
    if BUG == "softmax_module":
        return criterion(out, y)
    if BUG == "sigmoid_bce":
        z = out.squeeze(-1)
        return criterion(z if FIXED else torch.sigmoid(z), t)
    if BUG == "softmax_nll":
        return F.nll_loss(F.log_softmax(out, 1) if FIXED else F.softmax(out, 1), y)
    if BUG == "mse_broadcast":
        return F.mse_loss(out.squeeze(-1) if FIXED else out, t)
    if BUG == "l1_module":
        pred = out.squeeze(-1)
        return criterion(pred, t if FIXED else t.unsqueeze(-1))
    if BUG == "huber_broadcast":
        return F.huber_loss(out.squeeze(-1) if FIXED else out, t, delta=0.5)
    if BUG == "nll_logits":
        return F.nll_loss(F.log_softmax(out, 1) if FIXED else out, y)
    if BUG == "nll_module":
        y = torch.where(torch.arange(N) < 6, y, -1)   # two padding rows
        return criterion(F.log_softmax(out, 1) if FIXED else out, y)
    if BUG == "ctc_logits":
        return ctc(criterion, F.log_softmax(out, -1) if FIXED else out)
    if BUG == "ctc_softmax":
        return ctc(F.ctc_loss, out.log_softmax(-1) if FIXED else out.softmax(-1))
    soft = F.softmax(teacher(x) / 2.0, -1)
    if BUG == "kl_probs":
        log_probs = F.log_softmax(out / 2.0, -1)
        student = log_probs if FIXED else log_probs.exp()
        return F.kl_div(student, soft, reduction="batchmean")
    if BUG == "kl_logits":
        return F.kl_div(F.log_softmax(out, -1) if FIXED else out, soft, reduction="batchmean")
    if BUG == "kl_mean":
        return criterion(F.log_softmax(out / 2.0, -1), soft) * 4.0
    form = ARGS.form
    if form == "distill":
        T = 2.0
        soft = F.softmax(teacher(x) / T, -1)
        kd = F.kl_div(F.log_softmax(out / T, -1), soft, reduction="batchmean") * T * T
        return kd + F.cross_entropy(out, y)
    if form == "soft_targets":
        return F.cross_entropy(out, F.softmax(teacher(x), -1))
    if form == "smoothing":
        return nn.CrossEntropyLoss(label_smoothing=0.1)(out, y)
    if form == "log_nll":
        return F.nll_loss(F.log_softmax(out, -1), y)
    if form == "log_ce":
        return F.cross_entropy(torch.log_softmax(out, -1), y)
    if form == "log_probs":
        return F.nll_loss(torch.log(torch.softmax(out, -1) + 1e-8), y)
    if form == "bce":
        return F.binary_cross_entropy(torch.sigmoid(out[:, 0]), t.clamp(0, 1).round())
    if form == "row_target":
        return F.mse_loss(out, torch.ones(4)) + nn.L1Loss()(out, torch.zeros(1, 4))
    if form == "scalar_target":
        return F.smooth_l1_loss(out, torch.tensor(0.5))
    if form == "pairwise":
        a = out[:, None, :]
        b = out.detach()[None, :, :]
        return F.mse_loss(a, b.expand(1, N, 4), reduction="none").mean()
    if form == "lm":
        h = torch.randn(2, 5, D)
        logits = lm_head(h + out[:2, None, :1])
        labels = torch.randint(0, C, (2, 5))
        shift = logits[:, :-1, :].contiguous()
        return F.cross_entropy(shift.view(-1, C), labels[:, 1:].reshape(-1)) + \
            F.cross_entropy(out, y)
    if form == "nll_subset":
        return F.nll_loss(F.log_softmax(out, 1)[:, :5], y % 5)
    if form == "nll_logsigmoid":
        return F.nll_loss(F.logsigmoid(out), y)
    if form == "nll_gather":
        q = -F.nll_loss(out, y, reduction="none")   # Q(s, a)
        return F.mse_loss(q, t)
    if form == "hand_ce":
        return F.nll_loss(out, y) + torch.logsumexp(out, 1).mean()
    if form == "hand_ce_lse_first":
        lse = out.logsumexp(1)
        return (lse + F.nll_loss(out, y, reduction="none")).mean() + \
            F.nll_loss(out, y) + lse.mean()
    if form == "nll_ignore":
        pad = torch.arange(N) >= 6
        lp = F.log_softmax(out, 1).masked_fill(pad[:, None], 3.0)   # raw padding rows
        return F.nll_loss(lp, torch.where(pad, -100, y))
    if form == "nll_weighted":
        return nn.NLLLoss(weight=torch.linspace(0.5, 2.0, C))(F.log_softmax(out, 1), y)
    if form == "nll_bf16":
        return F.nll_loss(F.log_softmax(out.bfloat16() * 8, 1), y).float()
    if form == "nll_mixture":
        lp = torch.stack([F.log_softmax(out, 1), F.log_softmax(teacher(x), 1)])
        w = torch.tensor([0.7, 0.3]).log()[:, None, None]
        return F.nll_loss(torch.logsumexp(lp + w, 0), y)
    if form == "kl_log_target":
        return F.kl_div(F.log_softmax(out, -1), F.log_softmax(teacher(x), -1),
                        reduction="batchmean", log_target=True)
    if form == "kl_none_sum":
        return F.kl_div(F.log_softmax(out, -1), soft, reduction="none").sum(-1).mean()
    if form == "kl_pointwise":
        return F.kl_div(F.logsigmoid(out), torch.sigmoid(teacher(x)))
    if form == "pairwise_legacy":
        a = out[:, None, :4]
        return F.mse_loss(a, out.detach()[None, :, :4].expand(1, N, 4), reduce=False).mean()
    if form == "pairwise_positional":
        a = out[:, None, :4]
        return F.mse_loss(a, out.detach()[None, :, :4].expand(1, N, 4), None, None,
                          "none").mean()
    if form == "kl_legacy_sum":
        return F.kl_div(F.log_softmax(out, -1), soft, size_average=False) / N
    if form == "kl_positional":
        return F.kl_div(F.log_softmax(out, -1), soft, None, None, "batchmean")
    if form == "ctc":
        return ctc(F.ctc_loss, F.log_softmax(out, -1), reduction="none").mean()
    if form == "ctc_bf16":
        return ctc(F.ctc_loss, F.log_softmax(out.bfloat16() * 8, -1).float())
    if form == "eval":
        with torch.no_grad():
            F.cross_entropy(torch.softmax(model(x), -1), y)
        return F.cross_entropy(out, y)
    return F.cross_entropy(out, y)


for step in range(ARGS.steps):
    x = torch.randn(N, D)
    y = torch.randint(0, C, (N,))
    t = torch.rand(N)
    loss = loss_of(x, y, t)
    opt.zero_grad()
    loss.backward()
    opt.step()
