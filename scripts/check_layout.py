#!/usr/bin/env python3
"""The layout's one-way dependencies, checked on every build (make check-layout):

  - common/ includes no stage and no lab folder;
  - a stage NN_name/ includes only common/ and stages numbered NN or lower;
  - nothing outside lab/ includes anything in lab/ (the lab is the lessons' notebook: it may use
    the lessons, the lessons never use it);
  - a lab folder lab/NN_name/ includes only common/, the stages and lab folders numbered NN or lower.

Includes are the `#include "..."` / `#include <...>` lines of C and CUDA files (.c .cu .h .cuh).
One line per violation (file:line, what it includes, the rule), exit 1; silent and exit 0 when
the tree is clean.

    scripts/check_layout.py [--root DIR]
"""
import argparse
import os
import re
import sys

SRC_EXT = (".c", ".cu", ".h", ".cuh")
SKIP_DIRS = {".git", "results", "__pycache__", ".criterion"}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')
STAGE = re.compile(r"^(\d\d)_[A-Za-z0-9_]+$")


def stage_number(part):
    m = STAGE.match(part)
    return int(m.group(1)) if m else None


def where(rel):
    """('common' | 'stage' | 'lab' | 'other', stage number or None) for a repository path."""
    parts = rel.split("/")
    if parts[0] == "common":
        return "common", None
    if parts[0] == "lab":
        return "lab", stage_number(parts[1]) if len(parts) > 2 else None
    n = stage_number(parts[0])
    if n is not None and len(parts) > 1:
        return "stage", n
    return "other", None


def violation(src_rel, target):
    """The rule an include of `target` from `src_rel` breaks, or None."""
    kind, n = where(src_rel)
    tparts = target.split("/")
    tkind, tn = where(target) if len(tparts) > 1 else ("other", None)
    if tkind == "lab" and kind != "lab":
        return "nothing outside lab/ may include lab/"
    if kind == "common" and tkind == "stage":
        return "common/ never includes a stage"
    if kind == "stage" and tkind == "stage" and tn > n:
        return "a stage includes only common/ and earlier stages"
    if kind == "lab" and tkind in ("stage", "lab") and n is not None and tn is not None and tn > n:
        return "a lab folder includes only common/, and stages and lab folders up to its own number"
    return None


def scan(root):
    bad = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith("build")
                             and not (rel_dir == "." and d.startswith(".")))
        for f in sorted(filenames):
            if not f.endswith(SRC_EXT):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            try:
                lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
            except OSError as e:
                bad.append(f"{rel}: cannot be read ({e.strerror})")
                continue
            for i, line in enumerate(lines, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                why = violation(rel, m.group(1))
                if why:
                    bad.append(f"{rel}:{i}: includes {m.group(1)}: {why}")
    return bad


def main():
    ap = argparse.ArgumentParser(description="Check the one-way dependencies of the layout.")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                    help="the repository root (default: this script's repository)")
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        print(f"check_layout: error: --root {args.root}: not a directory", file=sys.stderr)
        return 2
    bad = scan(args.root)
    for b in bad:
        print(f"check-layout: {b}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
