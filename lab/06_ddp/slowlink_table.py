#!/usr/bin/env python3
"""The slow-link table of 06_ddp/README.md from a device_slowlink.sh run (lab/device/).

Reads the logs and CSVs of one run (two GPUs, each run once over NVLink and once with the GPUs as
two emulated nodes, NCCL over its socket transport on the loopback interface) and writes one CSV
row per configuration: the step over each link, what the slow link added, and the accounting's
prediction of that cost — the bytes each rank must move over the link divided by the link's
large-message rate (the socket all-reduce's bus bandwidth at 1 GiB, measured in the same run):

    DDP (every variant), ZeRO-1  all-reduce / reduce-scatter + all-gather of the fp32 gradient:
                                 2(n-1)/n * 4*Psi bytes
    ZeRO-3                       all-gather (forward) + all-gather (backward) + reduce-scatter:
                                 3(n-1)/n * 4*Psi bytes
    pipeline, 1F1B               activations forward and their gradients backward at the one
                                 stage boundary: 2 * m * (b*T*d*4) bytes (m micro-batches of b rows)

The prediction is the cost if nothing hides it; what hides it is the measured difference.

    lab/06_ddp/slowlink_table.py lab/device/measured/2026-11-27_h200-x2-slowlink \
        06_ddp/results/2026-11-27_h200-x2/slowlink.csv
"""
import csv
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from table_csv import write_table  # noqa: E402

D_MODEL = {"medium": 1024}


def busbw_1g(log):
    for line in open(log):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[1] == "allreduce" and cells[3] == "1073741824":
            return float(cells[8]) * 1e9  # out-of-place busbw, GB/s
    raise SystemExit(f"slowlink_table.py: error: no 1 GiB all-reduce row in {log}")


def rows_of(path):
    return list(csv.DictReader(open(path)))


def pp_step(log):
    steps = [float(m.group(1)) for m in re.finditer(r"step ([0-9.]+) ms, busy", open(log).read())]
    if not steps:
        raise SystemExit(f"slowlink_table.py: error: no pipeline step line in {log}")
    return max(steps)  # the slowest rank's step


def main(src, out):
    bw = busbw_1g(f"{src}/link_socket.log")
    ddp = {n: rows_of(f"{src}/ddp_{n}.csv") for n in ("nvlink", "socket")}
    zero = {n: rows_of(f"{src}/zero_{n}.csv") for n in ("nvlink", "socket")}
    psi = int(zero["nvlink"][0]["optim_bytes_rank0"]) // 8 * int(zero["nvlink"][0]["ranks"])  # moments: 8 B/elem, 1/n each
    n = int(ddp["nvlink"][0]["ranks"])
    model, T, b = ddp["nvlink"][0]["model"], int(ddp["nvlink"][0]["context"]), int(ddp["nvlink"][0]["batch"])
    ar = 2 * (n - 1) / n * 4 * psi
    out_rows = []

    def add(config, what, nbytes, nv_ms, so_ms, exposed):
        out_rows.append({
            "configuration": config, "what crosses the link": what,
            "MB per rank per step": f"{nbytes / 1e6:.0f}",
            "NVLink step (ms)": f"{nv_ms:.1f}", "socket step (ms)": f"{so_ms:.1f}",
            "added (ms)": f"{so_ms - nv_ms:+.1f}", "predicted (ms)": f"{nbytes / bw * 1e3:.0f}",
            "exposed over socket (ms)": exposed})

    for nv, so in zip(ddp["nvlink"], ddp["socket"]):
        if nv["variant"] == "none":
            continue
        name = f"DDP {nv['variant']}" + (f" {nv['bucket_mb']} MiB" if nv["bucket_mb"] else "")
        add(name, "fp32 gradients (all-reduce)", ar, float(nv["step_ms"]), float(so["step_ms"]),
            f"{float(so['exposed_ms']):.1f}")
    for nv, so in zip(zero["nvlink"], zero["socket"]):
        level = nv["run"].replace("zero", "ZeRO-")
        nbytes = ar if level == "ZeRO-1" else 3 * (n - 1) / n * 4 * psi
        what = "gradients (reduce-scatter), parameters (all-gather)" if level == "ZeRO-1" else \
            "parameters (all-gather x2), gradients (reduce-scatter)"
        add(level, what, nbytes, float(nv["step_ms"]), float(so["step_ms"]), "")
    m, gb = 8, 16  # device_slowlink.sh: --micro-batches 8 --batch 16 (rows per micro-batch: 2)
    act = 2 * m * (gb // m) * T * D_MODEL[model] * 4
    add("pipeline 1F1B, p 2, m 8 (16 sequences)", "activations and their gradients (send/recv)", act,
        pp_step(f"{src}/pp_nvlink.log"), pp_step(f"{src}/pp_socket.log"), "")
    write_table(out, list(out_rows[0]), [list(r.values()) for r in out_rows])
    print(f"(Psi {psi}, socket busbw {bw / 1e9:.2f} GB/s)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: lab/06_ddp/slowlink_table.py RUN_DIR OUT.csv")
    main(*sys.argv[1:])
