#!/usr/bin/env python3
"""A results CSV as a Markdown table (used by bench.sh to turn the benchmark's appended rows
into the tables under results/01_benchmarking/).

    csv2md.py FILE [--cols a,b,c] [--title TEXT] [--where col=value ...]

Columns missing from the file are shown empty; rows are kept in file order."""
import argparse
import csv
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("file")
    p.add_argument("--cols", default="", help="comma list of columns to show (default: all)")
    p.add_argument("--title", default="")
    p.add_argument("--where", action="append", default=[], help="col=value filter (repeatable)")
    a = p.parse_args()
    try:
        with open(a.file, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"csv2md.py: error: cannot read {a.file}: {e.strerror}")
    for w in a.where:
        if "=" not in w:
            sys.exit(f"csv2md.py: error: --where wants col=value, got {w!r}")
        k, v = w.split("=", 1)
        rows = [r for r in rows if r.get(k) == v]
    cols = [c for c in a.cols.split(",") if c] or (list(rows[0].keys()) if rows else [])
    if a.title:
        print(f"### {a.title}\n")
    if not rows:
        print("(no rows)\n")
        return
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---" for _ in cols) + "|")
    for r in rows:
        print("| " + " | ".join((r.get(c) or "").replace("|", "/") for c in cols) + " |")
    print()


if __name__ == "__main__":
    main()
