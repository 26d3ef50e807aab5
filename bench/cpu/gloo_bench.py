#!/usr/bin/python3
"""gloo_bench: torch.distributed all_reduce (float32, sum) on CPU tensors with
the gloo backend, timed like hetccl-perf (nccl-tests' method), for
bench/cpu/compare.sh.

    gloo_bench.py -n N -G MIN-MAXxITERS[,...] [-f F] [-w W] [--addr 127.0.0.1]

Starts N ranks with torch.multiprocessing (env:// rendezvous on --addr and a
free port; GLOO_SOCKET_IFNAME=lo unless set). Each group MIN-MAXxITERS is what
one `hetccl-perf all_reduce -b MIN -e MAX -f F -n ITERS -w W -c 0` does:
a MAX-byte buffer of zeros, W warm-up all-reduces at MIN, 2 MIN, ... <= MAX,
then per size: one untimed op, a barrier, ITERS ops back to back (iteration i
at offset (i mod steps) * size in the buffer), time per op averaged over the
ranks, busbw = algbw * 2(n-1)/n. Gloo's all_reduce works in place (the tensor
is input and output), so this is gloo's in-place time; there is no
out-of-place all_reduce in torch.distributed. Output (rank 0): nccl-tests rows
(size count type redop root time algbw busbw #wrong).
"""
import argparse
import os
import socket
import sys
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip()
    if s and s[-1].upper() in mult:
        return int(s[:-1]) * mult[s[-1].upper()]
    return int(s)


def parse_groups(spec):
    groups = []
    for part in spec.split(","):
        rng, iters = part.split("x")
        lo, hi = rng.split("-")
        groups.append((parse_size(lo), parse_size(hi), int(iters)))
    return groups


def fmt_num(v, w):
    digits, p = 0, 1.0
    while v >= p and digits < 40:
        digits += 1
        p *= 10
    if digits < w - 2:
        return "%*.2f" % (w, v)
    if digits < w - 1:
        return "%*.1f" % (w, v)
    if digits < w + 1:
        return "%*.0f" % (w, v)
    return "%*.1e" % (w, v) if w >= 7 else "%*.0e" % (w, v)


def worker(rank, args, port):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = args.addr
    os.environ["MASTER_PORT"] = str(port)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(args.n)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=args.n)
    n = args.n
    groups = parse_groups(args.G)
    most = max(g[1] for g in groups)
    buf = torch.zeros(most // 4, dtype=torch.float32)
    if rank == 0:
        print("# gloo_bench all_reduce: %d ranks, float, sum, warm-up %d, factor %d; torch %s, gloo"
              % (n, args.w, args.f, torch.__version__))
        print("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s" %
              ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"))
        sys.stdout.flush()

    def launch(count, buf_elems, it):
        steps = buf_elems // count if count else 1
        shift = count * (it % (steps or 1))
        dist.all_reduce(buf[shift:shift + count], op=dist.ReduceOp.SUM)

    for lo, hi, iters in groups:
        buf_elems = hi // 4
        dist.barrier()
        s = lo
        while s <= hi:
            for w in range(args.w):
                launch(s // 4, buf_elems, w)
            s *= 2
        s = lo
        while s <= hi:
            count = s // 4
            launch(count, buf_elems, 0)
            dist.barrier()
            t0 = time.perf_counter()
            for it in range(iters):
                launch(count, buf_elems, it)
            sec = (time.perf_counter() - t0) / iters
            t = torch.tensor([sec], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            sec = t.item() / n
            algbw = count * 4 / 1e9 / sec if sec > 0 else 0.0
            busbw = algbw * 2 * (n - 1) / n
            if rank == 0:
                print("%12d  %12d  %8s  %6s  %6d  %7s  %6s  %6s    N/A" %
                      (count * 4, count, "float", "sum", -1, fmt_num(sec * 1e6, 7),
                       fmt_num(algbw, 6), fmt_num(busbw, 6)))
                sys.stdout.flush()
            s *= args.f
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, required=True, help="ranks")
    ap.add_argument("-G", required=True, help="MIN-MAXxITERS[,...]")
    ap.add_argument("-f", type=int, default=4, help="size factor")
    ap.add_argument("-w", type=int, default=2, help="warm-up iterations per size")
    ap.add_argument("--addr", default="127.0.0.1")
    args = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with socket.socket() as s:
        s.bind((args.addr, 0))
        port = s.getsockname()[1]
    import torch.multiprocessing as mp
    mp.start_processes(worker, args=(args, port), nprocs=args.n, join=True, start_method="spawn")


if __name__ == "__main__":
    main()
