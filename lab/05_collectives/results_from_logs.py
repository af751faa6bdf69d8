#!/usr/bin/env python3
"""Writes 05_collectives/results/2026-11-23_h200-x2/*.csv (the README's tables) from the raw rows
kept under lab/05_collectives/measured/. Run from the repository root:
    python3 lab/05_collectives/results_from_logs.py
"""
import csv, glob, os, shutil

M = "lab/05_collectives/measured"
OUT = "05_collectives/results/2026-11-23_h200-x2"
SIZES = [(1 << 20, "1 MiB"), (10 << 20, "10 MiB"), (100 << 20, "100 MiB"), (1 << 30, "1 GiB")]
OPS = {"allreduce": "all-reduce", "reducescatter": "reduce-scatter", "allgather": "all-gather",
       "broadcast": "broadcast"}


def rows(path):
    return list(csv.DictReader(open(path)))


def ours(paths, op, backend, key="oop_busbw_GBs"):
    got = {}
    for p in paths:
        for r in rows(p):
            if r["op"] == op and r["backend"] == backend:
                got[int(r["size"])] = r[key]
    return got


def torch(path, impl, ranks):
    return {int(r["size"]): r["busbw_GBs"] for r in rows(path) if r["impl"] == impl and int(r["ranks"]) == ranks}


def write(name, head, body):
    with open(os.path.join(OUT, name), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(head)
        w.writerows(body)


os.makedirs(OUT, exist_ok=True)
run2 = f"{M}/2026-11-23_h200x2/run2"
gpu = [f"{run2}/gpu_np2.csv"]
head = ["operation", "backend"] + [s for _, s in SIZES]
body = []
for op in OPS:
    for be, label in (("nccl", "nccl (the communicator)"), ("nccl-direct", "nccl-direct (NCCL called directly)")):
        g = ours(gpu, op, be)
        body.append([OPS[op], label] + [g.get(s, "-") for s, _ in SIZES])
    if op == "allreduce":
        g = ours([f"{run2}/ring_chunk_512M.csv"], op, "ring-nccl")
        body.append([OPS[op], "ring-nccl (the reference ring)"] + [g.get(s, "-") for s, _ in SIZES])
        g = torch(f"{M}/2026-11-23_h200x2/run1/torch.csv", "torch-nccl", 2)
        body.append([OPS[op], "PyTorch dist.all_reduce, NCCL"] + [g.get(s, "-") for s, _ in SIZES])
write("busbw_gpu.csv", head, body)

body = []
for chunk in ("16M", "64M", "128M", "512M"):
    p = f"{run2}/ring_chunk_{chunk}.csv" if chunk != "64M" else f"{run2}/gpu_np2.csv"
    g = ours([p], "allreduce", "ring-nccl")
    body.append([chunk.replace("M", " MiB"), g[1 << 30], f"{float(g[1 << 30]) / 325.05 * 100:.0f}%"])
write("ring_chunks.csv", ["chunk", "busbw GB/s at 1 GiB", "of nccl-direct"], body)

cpu = f"{M}/2026-11-23b_h200x2_cpu"
body = []
for n in (2, 4, 6):
    p = [f"{cpu}/cpu_np{n}.csv"]
    for be, label in (("mpi", "mpi (the communicator)"), ("mpi-lib", "mpi-lib (MPI_Allreduce)"),
                      ("ring-mpi", "ring-mpi (the reference ring)")):
        o, i = ours(p, "allreduce", be), ours(p, "allreduce", be, "ip_busbw_GBs")
        body.append([n, label] + [o[s] for s, _ in SIZES[:3]] + [i[100 << 20]])
    g = torch(f"{cpu}/torch.csv", "torch-gloo", n)
    body.append([n, "PyTorch Gloo"] + [g[s] for s, _ in SIZES[:3]] + ["-"])
write("busbw_cpu.csv", ["ranks", "backend", "1 MiB", "10 MiB", "100 MiB", "100 MiB in place"], body)
shutil.copy(f"{M}/2026-11-23_h200x2/busbw.png", f"{OUT}/busbw.png")
shutil.copy(f"{cpu}/busbw.png", f"{OUT}/busbw_cpu.png")
