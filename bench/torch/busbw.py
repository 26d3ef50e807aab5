"""All-reduce busbw through torch.distributed, float32 sum on CUDA tensors,
1 KiB .. MAX_BYTES (default 256 MiB), nccl-tests' formula: busbw = bytes /
time * 2 (n - 1) / n. One process per rank (hetccl-run, torchrun); the same
script with and without hetccl (LD_PRELOAD). BACKEND=gloo (default nccl)
runs torch's gloo backend on the same CUDA tensors: what a job mixing
vendors uses today. Rank 0 prints the table."""
import os
import time

import torch
import torch.distributed as dist


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    backend = os.environ.get("BACKEND", "nccl")
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=dev)
    else:
        dist.init_process_group(backend)
    max_bytes = int(os.environ.get("MAX_BYTES", 256 << 20))
    buf = torch.ones(max_bytes // 4, dtype=torch.float32, device=dev)
    if rank == 0:
        print(f"{'bytes':>12} {'time(us)':>10} {'busbw':>10}")
    size = 1024
    while size <= max_bytes:
        t = buf[: size // 4]
        iters = 50 if size <= (1 << 20) else 10 if size <= (64 << 20) else 3
        dist.all_reduce(t)  # warm-up
        torch.cuda.synchronize()
        dist.barrier()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / iters
        if rank == 0:
            busbw = size / dt / 1e9 * 2 * (world - 1) / world
            print(f"{size:12d} {dt * 1e6:10.1f} {busbw:10.2f}", flush=True)
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
