"""A small DDP training run with fixed seeds: an MLP on synthetic data, a
global batch of 64 split evenly over the ranks, SGD for STEPS steps. Rank 0
writes the loss of every step to $LOSS_FILE. With WORLD_SIZE=1 it is the
single-process reference on the same global batch."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

STEPS = int(os.environ.get("STEPS", "200"))
GLOBAL_BATCH = 64


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl", device_id=dev)
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(32, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator(device="cpu").manual_seed(42)
    w_true = torch.randn(32, 1, generator=gen)
    per_rank = GLOBAL_BATCH // world
    losses = []
    for step in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 32, generator=gen)
        y = torch.sin(x @ w_true) + 0.1 * torch.randn(GLOBAL_BATCH, 1, generator=gen)
        xs = x[rank * per_rank:(rank + 1) * per_rank].to(dev)
        ys = y[rank * per_rank:(rank + 1) * per_rank].to(dev)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(xs), ys)
        loss.backward()
        opt.step()
        # The global-batch loss: the mean of the ranks' means.
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        losses.append(global_loss.item())
    if rank == 0:
        with open(os.environ.get("LOSS_FILE", "/dev/stdout"), "w") as f:
            f.write("\n".join(f"{v:.8f}" for v in losses) + "\n")
        print(f"ddp world {world}: loss step 0 {losses[0]:.6f}, step {STEPS - 1} {losses[-1]:.6f}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
