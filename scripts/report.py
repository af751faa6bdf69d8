#!/usr/bin/env python3
"""Regenerates the measured tables of a stage README from its results/ folder (make report-NN).

A README marks each generated table with a pair of HTML comments; everything between them is
rewritten from the named file (a path relative to the README's folder):

    <!-- results: results/2026-11-27_h200/train_step.csv caption="Train step, batch 4, context 512 (ms)" -->
    ...generated...
    <!-- /results -->

The folder holding the file is named <date>_<gpu> (2026-11-27_h200, 2026-11-26_h100-x2), and the
caption line names both: "Train step, batch 4, context 512 (ms). NVIDIA H200, 2026-11-27." A
.csv becomes a Markdown table (its header row the table's head, cells as written: the CSV holds
the numbers as they should read); a .md file is inserted as it is. Optional attributes:

    columns=a,b,c     only these CSV columns, in this order
    where=col=value   only the CSV rows whose column holds that value (repeatable: where=a=1,b=x)
    align=lrr         column alignment, one letter per column (l, r, c; default: text left,
                      numbers right)

    scripts/report.py README.md [README.md ...]     rewrite the tables in place
    scripts/report.py --check README.md [...]       exit 1 and name each table that differs

A missing file, an unknown column or an unclosed marker is one line and exit 2; nothing is
written unless every table of that README was generated.
"""
import argparse
import csv
import io
import os
import re
import shlex
import sys

OPEN = re.compile(r"^<!-- results: (.*?) -->\s*$")
CLOSE = "<!-- /results -->"
GPU_NAMES = {"h100": "NVIDIA H100 80GB", "h200": "NVIDIA H200", "cpu": "CPU"}


class ReportError(Exception):
    pass


def gpu_and_date(folder):
    """('NVIDIA H200 (2 GPUs)', '2026-11-27') from '2026-11-27_h200-x2'."""
    m = re.match(r"^(\d{4}-\d\d-\d\d)_([a-z0-9]+)(?:-x(\d+))?$", folder)
    if not m:
        raise ReportError(f"results folder '{folder}' is not named <date>_<gpu> (e.g. 2026-11-27_h200 or 2026-11-27_h200-x2)")
    date, gpu, n = m.groups()
    name = GPU_NAMES.get(gpu, gpu.upper())
    if n:
        name = f"{n} × {name}"
    return name, date


def parse_attrs(text):
    parts = shlex.split(text)
    if not parts:
        raise ReportError("a results marker names no file")
    attrs = {"file": parts[0]}
    for p in parts[1:]:
        if "=" not in p:
            raise ReportError(f"results marker attribute '{p}' is not name=value")
        k, v = p.split("=", 1)
        if k not in ("caption", "columns", "where", "align"):
            raise ReportError(f"results marker attribute '{k}' is unknown (caption, columns, where, align)")
        attrs[k] = v
    return attrs


def is_number(s):
    return re.match(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?%?[x×]?$", s.strip()) is not None


def csv_table(path, attrs):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise ReportError(f"{path}: empty")
    head, body = rows[0], [r for r in rows[1:] if r]
    idx = {h: i for i, h in enumerate(head)}
    if "where" in attrs:
        for cond in attrs["where"].split(","):
            if "=" not in cond:
                raise ReportError(f"where={attrs['where']}: each condition is column=value")
            col, val = cond.split("=", 1)
            if col not in idx:
                raise ReportError(f"{path}: no column '{col}' (has {', '.join(head)})")
            body = [r for r in body if r[idx[col]] == val]
    cols = attrs["columns"].split(",") if "columns" in attrs else head
    for c in cols:
        if c not in idx:
            raise ReportError(f"{path}: no column '{c}' (has {', '.join(head)})")
    sel = [[r[idx[c]] if idx[c] < len(r) else "" for c in cols] for r in body]
    if "align" in attrs:
        align = attrs["align"]
        if len(align) != len(cols) or set(align) - set("lrc"):
            raise ReportError(f"align={align}: one of l, r, c per column ({len(cols)} columns)")
    else:
        align = "".join("r" if sel and all(is_number(r[i]) or r[i] in ("", "-", "OOM") for r in sel)
                        and any(is_number(r[i]) for r in sel) else "l" for i in range(len(cols)))
    rule = {"l": "---", "r": "---:", "c": ":---:"}
    out = io.StringIO()
    out.write("| " + " | ".join(cols) + " |\n")
    out.write("|" + "|".join(rule[a] for a in align) + "|\n")
    for r in sel:
        out.write("| " + " | ".join(x.replace("|", "\\|") for x in r) + " |\n")
    return out.getvalue()


def render(readme_dir, attrs):
    path = os.path.join(readme_dir, attrs["file"])
    if not os.path.isfile(path):
        raise ReportError(f"{attrs['file']}: no such results file (beside {readme_dir or '.'})")
    gpu, date = gpu_and_date(os.path.basename(os.path.dirname(os.path.abspath(path))))
    if path.endswith(".csv"):
        table = csv_table(path, attrs)
    elif path.endswith(".md"):
        table = open(path, encoding="utf-8").read()
        if not table.endswith("\n"):
            table += "\n"
    else:
        raise ReportError(f"{attrs['file']}: a results file is .csv or .md")
    caption = attrs.get("caption", "").rstrip(".")
    line = f"{caption}. {gpu}, {date}." if caption else f"{gpu}, {date}."
    return f"\n_{line}_\n\n{table}\n"


def regenerate(readme):
    text = open(readme, encoding="utf-8").read()
    lines = text.splitlines(keepends=True)
    out, i, n = [], 0, 0
    readme_dir = os.path.dirname(readme)
    while i < len(lines):
        m = OPEN.match(lines[i].rstrip("\n"))
        if not m:
            if lines[i].strip() == CLOSE:
                raise ReportError(f"{readme}:{i + 1}: '{CLOSE}' without its opening marker")
            out.append(lines[i])
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].strip() != CLOSE:
            if OPEN.match(lines[j].rstrip("\n")):
                raise ReportError(f"{readme}:{j + 1}: a results marker inside another (opened at line {start + 1})")
            j += 1
        if j == len(lines):
            raise ReportError(f"{readme}:{start + 1}: results marker never closed ('{CLOSE}')")
        try:
            body = render(readme_dir, parse_attrs(m.group(1)))
        except ReportError as e:
            raise ReportError(f"{readme}:{start + 1}: {e}")
        out.append(lines[i])
        out.append(body)
        out.append(lines[j])
        n += 1
        i = j + 1
    return text, "".join(out), n


def main():
    ap = argparse.ArgumentParser(description="Regenerate a README's measured tables from results/.")
    ap.add_argument("readmes", nargs="+", metavar="README.md")
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a README differs")
    args = ap.parse_args()
    status = 0
    for readme in args.readmes:
        if not os.path.isfile(readme):
            print(f"report: error: {readme}: no such file", file=sys.stderr)
            return 2
        try:
            old, new, n = regenerate(readme)
        except ReportError as e:
            print(f"report: error: {e}", file=sys.stderr)
            return 2
        if args.check:
            if old != new:
                print(f"report: {readme}: its tables differ from what results/ regenerates (make report-NN)")
                status = 1
        elif old != new:
            tmp = readme + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(new)
            os.replace(tmp, readme)
            print(f"report: {readme}: {n} table(s) regenerated")
        else:
            print(f"report: {readme}: {n} table(s), unchanged")
    return status


if __name__ == "__main__":
    sys.exit(main())
