"""Each rank gathers every rank's token count and checks they agree, as soft-moe-pytorch's
distributed experts do (`gather_sizes`, `has_only_one_value`), then trains a Linear.
`--world`'s fake process group moves nothing: a simulated rank reads the counts as every
rank holding its own (Note [A symmetric world], memledger/trace/fake_collectives.py)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
x = torch.randn(2, 3, 4)
size = torch.tensor(x.shape[-2], dtype=torch.long)
sizes = [torch.empty_like(size) for _ in range(dist.get_world_size())]
dist.all_gather(sizes, size)
total = torch.tensor(x.shape[0])
dist.all_reduce(total)
print("counts", torch.stack(sizes).tolist(), "batch", total.item())
w = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(w.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    w(x).sum().backward()
    opt.step()
dist.destroy_process_group()
