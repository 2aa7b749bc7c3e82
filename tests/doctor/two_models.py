"""Two optimizers in one loop, as people write them: no finding unless a gradient leaks.

    python two_models.py --loop gan          # a GAN, as in PyTorch's DCGAN tutorial
    python two_models.py --loop gan --bug    # the discriminator's zero_grad forgotten
    python two_models.py --loop gan --bug --freeze-d   # the same, the discriminator frozen
                                             # while the generator trains (pix2pix style):
                                             # frozen when the doctor first sees it
    python two_models.py --loop unfreeze     # a backbone frozen for 2 steps, then trained
    python two_models.py --loop heads        # a backbone and a head optimizer, one backward
    python two_models.py --loop distill      # a teacher under no_grad, then its student
    python two_models.py --loop distill --bug   # the student's head left out of its optimizer
    python two_models.py --loop distill --student-eval   # the student left in eval mode:
                                             # its Dropout is named `3` in every step (step 1
                                             # ran before it was named the model)
    python two_models.py --loop distill --teacher-grad   # the teacher (eval mode, in no
                                             # optimizer) run with grad and not frozen: its
                                             # gradients are computed and kept for nothing
                                             # (wasted_gradients, not eval_mode's train())

The GAN's generator loss backpropagates through the discriminator too, adding to the
gradient its optimizer already used; its zero_grad() clears that before its next step, so
nothing leaks. The generator's loss is kept after its backward until the next iteration.
"""
import contextlib
import sys

import torch
import torch.nn.functional as F
from torch import nn

LOOP = sys.argv[sys.argv.index("--loop") + 1]
BUG = "--bug" in sys.argv
FREEZE_D = "--freeze-d" in sys.argv
STUDENT_EVAL = "--student-eval" in sys.argv
TEACHER_GRAD = "--teacher-grad" in sys.argv
torch.manual_seed(0)
if LOOP == "gan":
    gen = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
    disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    og = torch.optim.Adam(gen.parameters(), 2e-4)
    od = torch.optim.Adam(disc.parameters(), 2e-4)
    ones, zeros = torch.ones(8, 1), torch.zeros(8, 1)
    for step in range(4):
        if FREEZE_D:   # no gradient for the discriminator while the generator trains
            disc.requires_grad_(False)
        fake = gen(torch.randn(8, 4))
        if FREEZE_D:
            g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
            og.zero_grad()
            g_loss.backward()
            og.step()
            disc.requires_grad_(True)
        loss_d = F.binary_cross_entropy_with_logits(disc(torch.randn(8, 8)), ones) + \
            F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros)
        if not BUG:
            od.zero_grad()
        loss_d.backward()
        od.step()
        if not FREEZE_D:
            loss_g = F.binary_cross_entropy_with_logits(disc(fake), ones)
            og.zero_grad()
            loss_g.backward()
            og.step()
elif LOOP == "distill":
    # the teacher runs first, so the student is named the model at the first step (Note
    # [The model]): its parameters are `0.weight`, not `Sequential.0.weight`
    teacher = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4), nn.Dropout(0.2)).eval()
    student = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Dropout(0.1))
    student.train(not STUDENT_EVAL)
    opt = torch.optim.SGD(student[0].parameters() if BUG else student.parameters(), lr=0.1)
    for step in range(4):
        x = torch.randn(4, 8)
        with contextlib.nullcontext() if TEACHER_GRAD else torch.no_grad():
            target = teacher(x)
        loss = F.mse_loss(student(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
elif LOOP == "unfreeze":
    # progressive unfreezing: the backbone is frozen for two steps, then trained (its
    # parameters were in the optimizer all along; frozen when the doctor first saw them)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model[0].requires_grad_(False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        if step == 2:
            model[0].requires_grad_(True)
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
else:
    body, head = nn.Linear(8, 16), nn.Linear(16, 4)
    model = nn.Sequential(body, head)
    opts = [torch.optim.SGD(body.parameters(), lr=0.1), torch.optim.SGD(head.parameters(), lr=0.1)]
    for step in range(4):
        loss = model(torch.randn(4, 8)).sum()
        for o in opts:
            o.zero_grad()
        loss.backward()
        for o in opts:
            o.step()
