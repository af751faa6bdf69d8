#!/usr/bin/env python3
"""07_zero/README.md's bf16 table from one device_new_stages.sh call (part fsdp): ours (ddp_train's
one-GPU and bucketed rows, zero_train's levels) beside PyTorch's bench_torch_zero.py --precision bf16.

    lab/07_zero/bf16_table.py lab/device/measured/2026-11-27_h200-x2-newstages \
        07_zero/results/2026-11-27_h200-x2/zero_xl_bf16.csv
"""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "device"))
from table_csv import write_table  # noqa: E402

GIB = 1024 ** 3


def main(src, out):
    ddp = {r["variant"]: r for r in csv.DictReader(open(f"{src}/ddp_bf16.csv"))}
    zero = list(csv.DictReader(open(f"{src}/zero_bf16.csv")))
    torch = {r["variant"]: r for r in csv.DictReader(open(f"{src}/torch_bf16.csv"))}
    one = float(ddp["none"]["step_ms"])
    z1 = [r for r in zero if r["run"] == "zero1"][0]
    z3 = [r for r in zero if r["run"] == "zero3"]  # first fp32 reduce-scatter, then bf16 (the order run)

    def ours(name, ms, peak):
        return [name, f"{ms:.1f}", f"{100 * (ms / one - 1):+.1f}%", peak]

    def pt(v, name):
        r = torch[v]
        base = float(torch["none"]["step_ms"])
        return [name, f"{float(r['step_ms']):.1f}", f"{100 * (float(r['step_ms']) / base - 1):+.1f}%", f"{float(r['peak_GiB']):.2f}"]

    peak = lambda r: f"{int(r['peak_bytes_rank0']) / GIB:.2f}"
    rows = [
        ours("one GPU", one, "-") + pt("none", "one GPU"),
        ours("DDP, bucketed 100 MiB", float(ddp["bucketed"]["step_ms"]), "-") + pt("ddp", "DistributedDataParallel"),
        ours("ZeRO-1", float(z1["step_ms"]), peak(z1)) + pt("zero", "DDP + ZeroRedundancyOptimizer"),
        ours("ZeRO-3, bf16 gathers, fp32 reduce-scatter", float(z3[0]["step_ms"]), peak(z3[0]))
        + pt("fsdp", "FSDP2, MixedPrecisionPolicy(bf16, reduce fp32)"),
        ours("ZeRO-3, bf16 gathers, bf16 reduce-scatter", float(z3[1]["step_ms"]), peak(z3[1])) + ["", "", "", ""],
    ]
    head = ["ours", "step (ms)", "over one GPU", "peak (GiB)", "PyTorch", "PyTorch step (ms)", "over its one GPU", "PyTorch peak (GiB)"]
    write_table(out, head, rows)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: lab/07_zero/bf16_table.py RUN_DIR OUT.csv")
    main(*sys.argv[1:])
