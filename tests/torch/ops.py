"""Every torch.distributed operation on the NCCL backend, checked against
values computed here. Launched one process per rank (hetccl-run, torchrun
or by hand: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK). The
script is the same with and without hetccl: tests/torch/run.sh decides.
All ranks use cuda:LOCAL_RANK % device_count (two ranks may share a GPU)."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    dev = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    failures = []
    verbose = os.environ.get("OPS_VERBOSE") == "1"

    def step(name):
        if verbose:
            torch.cuda.synchronize()
            print(f"rank {rank}: {name}", file=sys.stderr, flush=True)

    def check(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            failures.append(f"{name}: got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()}")

    n = 1000
    base = torch.arange(n, device=dev, dtype=torch.float32)
    mine = base + rank  # rank r contributes i + r
    s = world * (world - 1) / 2

    step("all_reduce ops")
    for op, want in [
        (dist.ReduceOp.SUM, base * world + s),
        (dist.ReduceOp.MAX, base + (world - 1)),
        (dist.ReduceOp.MIN, base),
        (dist.ReduceOp.AVG, base + s / world),
    ]:
        t = mine.clone()
        dist.all_reduce(t, op=op)
        check(f"all_reduce {op}", t, want)
    t = torch.full((n,), float(rank + 1), device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    check("all_reduce product", t, torch.full((n,), float(torch.arange(1, world + 1).prod()), device=dev))
    t = mine.clone()
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
    check("all_reduce premul_sum", t, (base * world + s) * 2)
    for dtype in (torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.float64, torch.uint8):
        t = (torch.arange(64, device=dev) % 7 + rank).to(dtype)
        dist.all_reduce(t)
        want = ((torch.arange(64, device=dev) % 7) * world + s).to(dtype)
        check(f"all_reduce {dtype}", t, want)

    step("broadcast")
    t = mine.clone() if rank == world - 1 else torch.zeros(n, device=dev)
    dist.broadcast(t, src=world - 1)
    check("broadcast", t, base + (world - 1))

    step("reduce")
    t = mine.clone()
    dist.reduce(t, dst=0)
    if rank == 0:
        check("reduce", t, base * world + s)

    step("all_gather")
    out = torch.empty(n * world, device=dev)
    dist.all_gather_into_tensor(out, mine)
    check("all_gather_into_tensor", out, torch.cat([base + r for r in range(world)]))
    outs = [torch.empty(n, device=dev) for _ in range(world)]
    dist.all_gather(outs, mine)
    for r in range(world):
        check(f"all_gather[{r}]", outs[r], base + r)

    step("reduce_scatter")
    inp = torch.cat([base + rank * 10 + k for k in range(world)])
    out = torch.empty(n, device=dev)
    dist.reduce_scatter_tensor(out, inp)
    check("reduce_scatter_tensor", out, base * world + 10 * s + rank * world)

    step("all_to_all")
    # all_to_all_single, equal splits: block k of rank r holds 100*r + k.
    inp = torch.cat([torch.full((4,), 100.0 * rank + k, device=dev) for k in range(world)])
    out = torch.empty(4 * world, device=dev)
    dist.all_to_all_single(out, inp)
    check("all_to_all_single", out, torch.cat([torch.full((4,), 100.0 * r + rank, device=dev) for r in range(world)]))
    # Unequal splits: rank r sends k+1 elements to rank k.
    in_splits = [k + 1 for k in range(world)]
    out_splits = [rank + 1] * world
    inp = torch.cat([torch.full((k + 1,), 100.0 * rank + k, device=dev) for k in range(world)])
    out = torch.empty(sum(out_splits), device=dev)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    check("all_to_all_single unequal", out,
          torch.cat([torch.full((rank + 1,), 100.0 * r + rank, device=dev) for r in range(world)]))

    step("send/recv")
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        t = torch.empty(n, device=dev)
        if rank % 2 == 0:
            dist.send(mine, nxt)
            dist.recv(t, prv)
        else:
            dist.recv(t, prv)
            dist.send(mine, nxt)
        check("send/recv", t, base + prv)
        t = torch.empty(n, device=dev)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, t, prv)])
        for q in reqs:
            q.wait()
        check("batch_isend_irecv", t, base + prv)

    step("barrier")
    dist.barrier()

    step("new_group")
    sub = dist.new_group(list(range(world)))
    t = mine.clone()
    dist.all_reduce(t, group=sub)
    check("new_group all_reduce", t, base * world + s)
    if hasattr(dist, "split_group") and world > 1:
        g = dist.split_group(split_ranks=[[r] for r in range(world)])
        t = mine.clone()
        dist.all_reduce(t, group=g)
        check("split_group (singletons) all_reduce", t, mine)

    step("destroy")
    torch.cuda.synchronize()
    dist.destroy_process_group()
    status = "FAIL" if failures else "PASS"
    print(f"rank {rank}/{world}: {status} ({len(failures)} failures)")
    for f in failures:
        print(f"rank {rank}: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
