"""One rank of tests/chaos/gpu.sh: a loop of 16 MiB all-reduces on cuda:0
under torch.distributed (hetccl through LD_PRELOAD). Prints LOOP once the
first one is done, DONE after the last. A result that differs from the exact
sum is WRONG, whatever happens next: after a failure hetccl releases the
streams only once its grace has passed, armed so that the call in flight
ends in a trap (HETCCL_RELEASE_TRAP), and torch.cuda.synchronize() then
raises instead of handing back a sum that never happened."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
# PyTorch's own rendezvous (the TCPStore: rank 0 waiting for the others to
# connect, the others for rank 0's store and for the unique id) waits 10
# minutes by default for a rank that never comes; bound it by the same
# HETCCL_TIMEOUT as hetccl's rendezvous, so that a rank killed before it
# joined either ends every survivor within one such wait.
timeout = datetime.timedelta(seconds=int(os.environ.get("HETCCL_TIMEOUT", "600")))
dist.init_process_group("nccl", device_id=dev, timeout=timeout)
expect = float(world * (world + 1) // 2)
x = torch.empty(4 << 20, device=dev)
# Enough that the fault lands inside the loop (a count, not a clock, so that
# every rank runs the same calls): 400 ended within 0.5 s on the H200, before
# most SIGSTOPs landed.
for i in range(int(os.environ.get("ITERS", "20000"))):
    x.fill_(rank + 1)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    if i == 0:
        print("LOOP", flush=True)
    bad = (x != expect).sum().item()
    if bad:
        # The wall clock, to set against the script's fault time and
        # PyTorch's watchdog lines in a kept log.
        print(f"WRONG rank {rank} iteration {i}: {bad} elements at {time.time():.3f}", flush=True)
        sys.exit(3)
print("DONE", flush=True)
dist.destroy_process_group()
