#!/usr/bin/env python3
"""Checks of the student edition, one step per call; tests/test_student.c runs them.

    tests/student_selftest.py markers   the checker refuses nested, unclosed, unlisted, unmarked regions
                                        and a kernel in no region (in a file with regions or without);
                                        the grade map and the region list agree
    tests/student_selftest.py tree      the student tree of each edition: byte-identical outside the
                                        regions it stubs, no solution line inside, no .git, no lab/,
                                        no measured/ logs, round trip back to the solution
    tests/student_selftest.py editions  the 2026 map has the 2026 handout's problems and points; a bad
                                        --edition or EDITION exits 2 in one line; a 2026 tree stubs
                                        the 2026 calculations, keeps the 2025-only regions and grades
                                        as 2026; a not-built problem never passes
    tests/student_selftest.py docs      INSTRUCTORS.md's generated tables match the TSVs (and a drifted
                                        copy is refused); README.md and INSTRUCTORS.md within budget
    tests/student_selftest.py stages    STAGES=01,02 releases 01-02 and leaves 03-08 out
    tests/student_selftest.py compile   each edition's stubbed C files compile with the build's warnings as errors
    tests/student_selftest.py full      build the student tree's stages 01-08 (no warnings), its
                                        CPU tests fail with the task messages, its grade is 0 for every
                                        problem with a region and full for the rest, the solution grades
                                        full on every CPU-testable problem (minutes: make test-student, CI)
    tests/student_selftest.py quick     markers, tree, stages, docs and editions, one after the other
    tests/student_selftest.py regions [ID,ID]
                                        each CPU region's marker names the right tests: in a student
                                        tree they fail; with that one region filled back (the others
                                        still stubs) they pass (minutes: make check-regions [REGIONS=..])
Exit 0 when the step holds; otherwise one line per problem and exit 1.
"""
import contextlib
import fnmatch
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import student  # noqa: E402
import grade  # noqa: E402

PROBLEMS = []


def bad(msg):
    PROBLEMS.append(msg)
    print("FAIL: " + msg)


def run(cmd, cwd=REPO, env=None, timeout=1800):
    e = dict(os.environ)
    for k in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        e.pop(k, None)
    if env:
        e.update(env)
    p = subprocess.run(cmd, cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


GOOD = """#include "common/check.h"
int f(int a, const float* b) {
    // STUDENT-BEGIN(02.f): write f | see README.md §x | test: test_02 x/*
    return a + (int)b[0];
    // STUDENT-END(02.f)
}
"""


def fake_root(tmp, name, text, manifest="02.f\t02_x/a.c\tf\n", extra=None):
    root = os.path.join(tmp, name)
    os.makedirs(os.path.join(root, "02_x"))
    os.makedirs(os.path.join(root, "scripts"))
    open(os.path.join(root, "02_x", "a.c"), "w").write(text)
    open(os.path.join(root, student.MANIFEST), "w").write(manifest)
    for rel, body in (extra or {}).items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        open(os.path.join(root, rel), "w").write(body)
    return root


KERNEL = "__global__ void k(float* p) {\n    p[0] = 1.0f;\n}\n"


def step_markers():
    cases = {
        "good": (GOOD, None, None),
        "nested": (GOOD.replace("    return a", "    // STUDENT-BEGIN(02.g): x | see y | test: z\n    return a"),
                   None, "do not nest"),
        "unclosed": (GOOD.replace("    // STUDENT-END(02.f)\n", ""), None, "never closed"),
        "end_without_begin": (GOOD + "// STUDENT-END(02.f)\n", None, "without a STUDENT-BEGIN"),
        "wrong_end": (GOOD.replace("STUDENT-END(02.f)", "STUDENT-END(02.g)"), None, "closes region 02.f"),
        "no_task": (GOOD.replace(": write f | see README.md §x | test: test_02 x/*", ""), None, "task"),
        "wrong_stage": (GOOD.replace("02.f", "03.f"), "03.f\t02_x/a.c\tf\n", "stage"),
        "not_a_body": (GOOD.replace("int f(int a, const float* b) {\n", "int f(int a, const float* b) {\n    int z = 0;\n"),
                       None, "follow the line that opens a function body"),
        # the solution-like cases: a listed function whose markers are gone, a kernel outside a region
        "unmarked": (GOOD.replace("    // STUDENT-BEGIN(02.f): write f | see README.md §x | test: test_02 x/*\n", "")
                     .replace("    // STUDENT-END(02.f)\n", ""), None, "not marked in the source"),
        "unlisted": (GOOD, "# empty\n", "not listed"),
        "kernel_outside": (GOOD, "02.f\t02_x/a.c\tf\n02.g\t02_x/b.cu\tg\n", "02_x/b.cu:7: kernel k is neither",
                           {"02_x/b.cu": GOOD.replace("02.f", "02.g").replace("int f(", "int g(") + KERNEL}),
        "malformed": (GOOD.replace("// STUDENT-END(02.f)", "// STUDENT-END 02.f"), None, "malformed"),
        # a kernel in a released .cu file that has no region at all: refused, named, with the two ways out
        "kernel_in_file_without_regions": (GOOD, None, "02_x/k.cu:1: kernel k is neither in a region nor given",
                                           {"02_x/k.cu": KERNEL}),
        "kernel_given": (GOOD, "02.f\t02_x/a.c\tf\ngiven\t02_x/k.cu\tk\ta helper\n", None, {"02_x/k.cu": KERNEL}),
        "given_stale": (GOOD, "02.f\t02_x/a.c\tf\ngiven\t02_x/k.cu\tgone\ta helper\n", "no such __global__ kernel",
                        {"02_x/k.cu": KERNEL}),
        # the lab is never released: its kernels need neither regions nor given rows
        "kernel_in_lab": (GOOD, None, None, {"lab/02_x/k.cu": KERNEL, "02_x/measured/k.cu": KERNEL}),
        # "uses:" names the static helpers only the solution calls (the stub mentions them)
        "uses": (GOOD.replace("x/*\n", "x/* | uses: g\n").replace("#include \"common/check.h\"\n",
                 "#include \"common/check.h\"\nstatic int g(void) { return 1; }\n"), None, None),
        "uses_bad": (GOOD.replace("x/*\n", "x/* | uses: 9g\n"), None, "is not a function name"),
        "fifth_field": (GOOD.replace("x/*\n", "x/* | y\n"), None, "uses: <helpers>"),
        # "needs:" names the other regions that its tests also need
        "needs_unknown": (GOOD.replace("x/*\n", "x/* | needs: 02.g\n"), None, "names no other region"),
        "needs_bad_id": (GOOD.replace("x/*\n", "x/* | needs: g\n"), None, "is not a region id"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases.items():
            text, manifest, want = case[:3]
            root = fake_root(tmp, name, text, manifest or "02.f\t02_x/a.c\tf\n", case[3] if len(case) > 3 else None)
            rc, out = run([sys.executable, os.path.join(REPO, "scripts", "student.py"), "check", "--root", root])
            if want is None and rc != 0:
                bad(f"markers/{name}: a good file was refused: {out.strip()}")
            elif want is not None and (rc != 2 or want not in out):
                bad(f"markers/{name}: want exit 2 and '{want}', got exit {rc}: {out.strip()}")
    rc, out = run([sys.executable, "scripts/student.py", "check"])
    if rc != 0:
        bad(f"markers: the repository's own markers fail the check: {out.strip()}")
    # The grade map names only listed regions, and every listed region is behind some problem
    # (else a stub would leave a problem at full marks in the student tree).
    manifest, _ = student.read_manifest(REPO)
    named = set()
    for edition, rel in sorted(student.EDITIONS.items()):
        for n, line in enumerate(open(os.path.join(REPO, rel), encoding="utf-8")):
            if not line.strip() or line.startswith("#"):
                continue
            f = line.rstrip("\n").split("\t")
            regions = [] if len(f) < 6 or f[5].strip() == "-" else f[5].split()
            for rid in regions:
                if rid not in manifest:
                    bad(f"markers: {rel}:{n + 1}: {f[0]} names region {rid}, which {student.MANIFEST} lacks")
            if regions and f[4].strip() in ("-", grade.NOT_BUILT):
                bad(f"markers: {rel}:{n + 1}: {f[0]} has regions but no test")
            named.update(regions)
    for rid in sorted(set(manifest) - named):
        bad(f"markers: region {rid} is behind no problem of any edition's grade map")


def outside(lines, regions):
    """The file with every region's inside cut out (markers kept)."""
    keep, k = [], 0
    for r in sorted(regions, key=lambda r: r.begin):
        keep.extend(lines[k:r.begin + 1])
        k = r.end
    keep.extend(lines[k:])
    return keep


def make_tree(dest, stages=None, edition=None):
    cmd = [sys.executable, "scripts/student.py", "make", dest] + (["--stages", stages] if stages else []) \
        + (["--edition", edition] if edition else [])
    rc, out = run(cmd)
    if rc != 0:
        bad(f"student.py make failed (exit {rc}): {out.strip()}")
    return out


def step_tree():
    for edition in sorted(student.EDITIONS):
        tree_of(edition)


def tree_of(edition):
    """The student tree of one edition: its stubs replace exactly the regions that the edition
    does not keep as given code; a given region is solution text, byte for byte."""
    every = student.check(REPO, quiet=True)
    given = student.given_regions(REPO, edition)
    regions = [r for r in every if r.id not in given]
    by_file, all_by_file = {}, {}
    for r in regions:
        by_file.setdefault(r.path, []).append(r)
    for r in every:
        all_by_file.setdefault(r.path, []).append(r)
    with tempfile.TemporaryDirectory() as tmp:
        dest = os.path.join(tmp, "student")
        out = make_tree(dest, edition=edition)
        if f"edition: {edition}\n" not in open(os.path.join(dest, ".student-edition"), encoding="utf-8").read():
            bad(f"tree: {edition}: .student-edition does not name the edition")
        if f"edition: {edition} (" not in out:
            bad(f"tree: {edition}: make does not say which edition it wrote: {out.strip()}")
        if os.path.exists(os.path.join(dest, ".git")):
            bad("tree: the student tree has a .git")
        for d, dirs, _ in os.walk(dest):
            for x in dirs:
                rel = os.path.relpath(os.path.join(d, x), dest)
                if rel == "lab" or x == "measured":
                    bad(f"tree: the student tree has {rel}/ (the lab and the logs stay out)")
        files = [f for f in student.rel_files(REPO) if not student.NOT_HANDED_OUT.search(f)]
        for f in files:
            src, dst = os.path.join(REPO, f), os.path.join(dest, f)
            if not os.path.exists(dst):
                bad(f"tree: {f} is missing from the student tree")
                continue
            if f not in by_file:
                if open(src, "rb").read() != open(dst, "rb").read():
                    bad(f"tree: {f} differs though it has no region")
                continue
            sl = open(src, encoding="utf-8").read().splitlines(keepends=True)
            dl = open(dst, encoding="utf-8").read().splitlines(keepends=True)
            dregions, _ = student.find_regions(f, "".join(dl))
            if [r.id for r in dregions] != [r.id for r in all_by_file[f]]:
                bad(f"tree: {f}: the student copy's regions differ from the solution's")
                continue
            for r in [x for x in dregions if x.id in given]:  # given code: the solution's body, whole
                s = next(x for x in all_by_file[f] if x.id == r.id)
                if dl[r.begin:r.end + 1] != sl[s.begin:s.end + 1]:
                    bad(f"tree: {edition}: {f}: region {r.id} is given in this edition but not the solution's")
            dregions = [x for x in dregions if x.id not in given]
            if outside(sl, by_file[f]) != outside(dl, dregions):
                bad(f"tree: {f}: a line outside the regions changed")
            # no solution line survives: a region line found nowhere else in the solution file
            inside = set()
            for r in by_file[f]:
                inside.update(range(r.begin + 1, r.end))
            rest = {sl[i].strip() for i in range(len(sl)) if i not in inside}
            dset = {x.strip() for x in dl}
            for i in sorted(inside):
                s = sl[i].strip()
                if len(s) > 3 and s not in rest and s in dset:
                    bad(f"tree: {f}:{i + 1}: a solution line survived: {s}")
            for r in dregions:
                body = "".join(dl[r.begin + 1:r.end])
                if not r.kernel and "is yours to write — see " not in body:
                    bad(f"tree: {edition}: {f}: region {r.id}'s stub does not fail naming the task")
        lab_stays_out(tmp)
        extra = set(student._walk(dest)) - set(files) - {".student-edition"}
        if extra:
            bad(f"tree: files in the student tree that are not in the solution: {sorted(extra)[:5]}")
        # round trip: fill the regions back from the solution: byte-identical files
        rc, out = run([sys.executable, "scripts/student.py", "fill", dest])
        if rc != 0:
            bad(f"tree: fill failed: {out.strip()}")
        for f in by_file:
            if open(os.path.join(REPO, f), "rb").read() != open(os.path.join(dest, f), "rb").read():
                bad(f"tree: round trip: {f} is not byte-identical to the solution after fill")


def lab_stays_out(tmp):
    """A planted lab/ and measured/ log folder stay out of the tree, and come with --with-lab."""
    root = fake_root(tmp, "with_lab", GOOD, extra={"lab/02_x/k.cu": KERNEL, "lab/02_x/NOTES.md": "notes\n",
                                                   "02_x/measured/log.txt": "log\n", "02_x/README.md": "x\n"})
    for flags, want in (([], False), (["--with-lab"], True)):
        dest = os.path.join(tmp, "with_lab_out" + "".join(flags))
        rc, out = run([sys.executable, "scripts/student.py", "make", dest, "--root", root] + flags)
        if rc != 0:
            bad(f"tree: make of a tree with a lab failed (exit {rc}): {out.strip()}")
            continue
        for rel in ("lab/02_x/k.cu", "02_x/measured/log.txt"):
            if os.path.exists(os.path.join(dest, rel)) != want:
                bad(f"tree: make {' '.join(flags)}: {rel} is {'missing' if want else 'in the student tree'}")
        if not os.path.exists(os.path.join(dest, "02_x", "README.md")):
            bad("tree: make of a tree with a lab left out a lesson file")


def step_stages():
    with tempfile.TemporaryDirectory() as tmp:
        dest = os.path.join(tmp, "s")
        out = make_tree(dest, "01,02")
        for d in os.listdir(REPO):
            if re.match(r"^0[3-8]_", d) and os.path.exists(os.path.join(dest, d)):
                bad(f"stages: {d} is in a tree that releases 01,02")
        if "left out (not released yet)" not in out:
            bad(f"stages: make does not say what it left out: {out.strip()}")
        for f in ("02_weighted_sum/weighted_sum_ref.c", "01_benchmarking/accumulation_cpu.c"):
            if "is yours to write" not in open(os.path.join(dest, f), encoding="utf-8").read():
                bad(f"stages: {f} was not stubbed")
        rc, out = run([sys.executable, "scripts/student.py", "make", os.path.join(tmp, "x"), "--stages", "1x"])
        if rc == 0 or "not a stage number" not in out:
            bad(f"stages: a bad --stages is accepted: {out.strip()}")
        rc, out = run([sys.executable, "scripts/student.py", "make", dest])
        if rc == 0 or "not empty" not in out:
            bad(f"stages: make into a non-empty directory is accepted: {out.strip()}")


# The 2026 handout's problems and points, written here from its text ("Problem (name): Title (N
# points)", version 26.1.1), not from the map: the map must agree with them.
HANDOUT_2026 = {
    "benchmarking_script": 4, "nsys_profile": 5, "mixed_precision_accumulation": 1,
    "benchmarking_mixed_precision": 2, "memory_profiling": 4, "gradient_checkpointing": 4,
    "pytorch_attention": 2, "torch_compile": 2, "flash_forward": 15, "flash_backward": 5,
    "flash_benchmarking": 5, "distributed_communication_single_node": 5, "naive_ddp": 5,
    "naive_ddp_benchmarking": 3, "minimal_ddp_flat_benchmarking": 2, "ddp_overlap_individual_parameters": 5,
    "ddp_overlap_individual_parameters_benchmarking": 1, "optimizer_state_sharding": 15,
    "optimizer_state_sharding_accounting": 5, "fsdp": 15, "fsdp_accounting": 5, "alternate_ring_all_reduce": 1,
    "data_parallel_calcs": 3, "fsdp_calcs": 3, "tp_calcs": 4, "fsdp_tp_calcs": 6, "leaderboard": 10,
}
# The regions of the 2026 cost calculations (07_zero/accounting.c) and of 2025's
# communication_accounting, which the 2026 handout drops.
CALC_2026 = {"07.acct_ring_all_gather", "07.acct_ring_reduce_scatter", "07.acct_ring_all_reduce",
             "07.acct_alt_ring_all_reduce", "07.acct_dp", "07.acct_fsdp", "07.acct_tp", "07.acct_fsdp_tp"}
COMM_2025 = {"07.acct_memory", "07.acct_devices_whole", "07.acct_fsdp_bytes", "07.acct_fsdp_min_degree",
             "07.acct_layer_times", "07.acct_compute_bound", "07.acct_x_opt", "07.acct_smallest_above"}


def one_line_exit_2(cmd, want, what, cwd=REPO):
    rc, out = run(cmd, cwd=cwd)
    if rc != 2 or len(out.strip().splitlines()) != 1 or any(w not in out for w in want):
        bad(f"editions: {what}: want exit 2 and one line naming {want}, got exit {rc}: {out.strip()[:600]}")


def step_editions():
    # the 2026 map: every problem of the handout, with its points (parts of one problem add up)
    rows = grade.read_map(os.path.join(REPO, student.EDITIONS["2026"]))
    points = {}
    for r in rows:
        if r["source"] == "course":
            name = re.sub(r" \([a-z]\)$", "", r["problem"])
            points[name] = points.get(name, 0) + r["points"]
    for name in sorted(set(HANDOUT_2026) | set(points)):
        if HANDOUT_2026.get(name) != points.get(name):
            bad(f"editions: grade_map_2026.tsv gives {name} {points.get(name, 'no row')} points, "
                f"the 2026 handout {HANDOUT_2026.get(name, 'no such problem')}")
    for r in rows:
        if r["not_built"] and (r["tests"] or r["regions"]):
            bad(f"editions: {r['problem']}: a not-built row names tests or regions")
    # a bad edition: one line, exit 2, before anything is built or written
    allowed = ["2025, 2026", "'2027'"]
    one_line_exit_2([sys.executable, "scripts/grade.py", "--edition", "2027"], allowed + ["--edition"], "grade.py")
    one_line_exit_2([sys.executable, "scripts/grade.py", "table", "--edition", "2027"], allowed, "grade.py table")
    one_line_exit_2(["make", "--no-print-directory", "-n", "grade", "EDITION=2027"], ["EDITION=2027", "2025, 2026"],
                    "make grade")
    one_line_exit_2(["make", "--no-print-directory", "-n", "student", "DEST=/nonexistent", "EDITION=x"],
                    ["EDITION=x", "2025, 2026"], "make student")
    with tempfile.TemporaryDirectory() as tmp:
        one_line_exit_2([sys.executable, "scripts/student.py", "make", os.path.join(tmp, "bad"), "--edition", "2027"],
                        allowed, "student.py make")
        if os.path.exists(os.path.join(tmp, "bad")):
            bad("editions: student.py make --edition 2027 wrote a tree")
        # which regions each edition keeps as given code
        g25, g26 = student.given_regions(REPO, "2025"), student.given_regions(REPO, "2026")
        if g25 != CALC_2026:
            bad(f"editions: the 2025 tree should keep exactly the 2026 calculations given, keeps {sorted(g25)}")
        if not COMM_2025 <= g26 or g26 & CALC_2026:
            bad(f"editions: the 2026 tree should keep communication_accounting's regions given and stub the "
                f"2026 calculations; it keeps {sorted(g26)}")
        # the 2026 tree: the calculations are stubs, communication_accounting is the solution
        dest = os.path.join(tmp, "s26")
        make_tree(dest, edition="2026")
        f = "07_zero/accounting.c"
        sol = {r.id: r for r in student.all_regions(REPO) if r.path == f}
        sl = open(os.path.join(REPO, f), encoding="utf-8").read().splitlines(keepends=True)
        text = open(os.path.join(dest, f), encoding="utf-8").read()
        dl = text.splitlines(keepends=True)
        for r in student.find_regions(f, text)[0]:
            body = "".join(dl[r.begin + 1:r.end])
            solved = dl[r.begin:r.end + 1] == sl[sol[r.id].begin:sol[r.id].end + 1]
            if r.id in CALC_2026 and (solved or f"07: {r.func} is yours to write" not in body):
                bad(f"editions: 2026 tree: {r.id} is not a stub")
            if r.id in COMM_2025 and not solved:
                bad(f"editions: 2026 tree: {r.id} (communication_accounting, not in 2026) is not given code")
        # make grade there grades the 2026 edition by default (stage 11 has no 2026 row: nothing to
        # run, the edition's heading all the same), and its map grades the leaderboard by tests
        out_dir = os.path.join(tmp, "g26")
        rc, out = run([sys.executable, "scripts/grade.py", "--stages", "11", "--out", out_dir], cwd=dest)
        g = json.load(open(os.path.join(out_dir, "grade.json"))) if rc == 0 else {}
        if g.get("edition") != "2026" or "# Grade, 2026 edition" not in out or g["total"]["possible"] != 0:
            bad(f"editions: make grade in a 2026 tree does not grade the 2026 edition (exit {rc}): {out.strip()[-600:]}")
        lb = [ln.split("\t") for ln in open(os.path.join(dest, "scripts", "grade_map_2026.tsv"), encoding="utf-8")
              if ln.startswith("leaderboard\t")]
        if len(lb) != 1 or "not-built" in lb[0][4] or "leaderboard" not in lb[0][4]:
            bad(f"editions: the 2026 map's leaderboard row is not graded by its tests: {lb}")
        # a not-built row never passes, whatever else the map holds; 'not-built' stands alone
        fake = os.path.join(tmp, "map.tsv")
        open(fake, "w").write("ghost\t7\tcourse\t01\tnot-built\t-\nessay\t2\tcourse\t01\t-\t-\n")
        out_dir = os.path.join(tmp, "gf")
        rc, out = run([sys.executable, "scripts/grade.py", "--map", fake, "--stages", "01", "--out", out_dir])
        g = json.load(open(os.path.join(out_dir, "grade.json"))) if rc == 0 else {"problems": []}
        st = {p["problem"]: p for p in g["problems"]}
        if st.get("ghost", {}).get("status") != "not built" or st["ghost"]["earned"] != 0 \
                or g["total"]["possible"] != 7 or "not built in this workbook yet" not in out \
                or st.get("essay", {}).get("status") != "by hand":
            bad(f"editions: a not-built row is not graded 'not built', 0 of 7 (exit {rc}): {out.strip()[-600:]}")
        open(fake, "w").write("ghost\t7\tcourse\t01\tnot-built test_01:x/*\t-\n")
        rc, out = run([sys.executable, "scripts/grade.py", "--map", fake, "--stages", "01", "--out", out_dir])
        if rc == 0 or "stands alone" not in out:
            bad(f"editions: a not-built row that also names tests is accepted (exit {rc}): {out.strip()}")


PROCESS_WORDS = re.compile(r"issue [0-9]+|(first|second|third|this|last|next) session|\brun [0-9]+\b", re.I)


def step_docs():
    """INSTRUCTORS.md's two tables are what the scripts generate from the TSVs; a drifted copy is
    refused; the root README and INSTRUCTORS.md keep their size budgets and speak of the repository."""
    doc = os.path.join(REPO, "INSTRUCTORS.md")
    checks = ((["scripts/student.py", "table"], "regions"), (["scripts/grade.py", "table"], "grades"),
              (["scripts/grade.py", "table", "--edition", "2026"], "grades-2026"))
    current = True
    for cmd, name in checks:
        rc, out = run([sys.executable] + cmd + ["--check", doc])
        if rc != 0:
            current = False
            bad(f"docs: INSTRUCTORS.md's {name} table is not what '{' '.join(cmd)}' gives (make instructors): {out.strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        if not current:
            checks = ()  # the drift test below starts from a current file
        text = open(doc, encoding="utf-8").read()
        for cmd, name in checks:
            rc, table = run([sys.executable] + cmd)
            row = table.splitlines()[5]  # a row of the table: drop it from a copy
            drifted = os.path.join(tmp, f"{name}.md")
            open(drifted, "w", encoding="utf-8").write(text.replace(row + "\n", "", 1))
            rc, out = run([sys.executable] + cmd + ["--check", drifted])
            if rc != 1 or "differs" not in out:
                bad(f"docs: a {name} table with a row missing passes --check (exit {rc}): {out.strip()}")
            rc, out = run([sys.executable] + cmd + ["--write", drifted])
            if rc != 0 or open(drifted, encoding="utf-8").read() != text:
                bad(f"docs: --write does not restore the {name} table (exit {rc}): {out.strip()}")
    for f, limit in (("README.md", 12 * 1024), ("INSTRUCTORS.md", 20 * 1024)):
        size = os.path.getsize(os.path.join(REPO, f))
        if size > limit:
            bad(f"docs: {f} is {size} bytes, over its budget of {limit}")
    for f in ("README.md", "INSTRUCTORS.md", "tests/student_selftest.py", "tests/test_student.c", ".ci/run",
              "scripts/student.py", "scripts/grade.py"):
        for n, line in enumerate(open(os.path.join(REPO, f), encoding="utf-8")):
            if PROCESS_WORDS.search(line) and "PROCESS_WORDS = " not in line:
                bad(f"docs: {f}:{n + 1}: process words: {line.strip()[:100]}")


def marker_tests(r):
    """[(binary, pattern)] of a marker's 'test:' field ('test_07 a/* b/*', 'test_03 x/* test_04 y/*')."""
    out, binary = [], None
    for w in r.test.split():
        if re.fullmatch(r"test_(common|\d\d)", w):
            binary = w
        elif binary:
            out.append((binary, w))
    return out


def run_tests(tree, binary, pattern, tmp):
    """{suite/test: status} of one binary's tests that match the pattern, run in the tree."""
    path = grade.binary_path("build", binary)
    js = os.path.join(tmp, "run.json")
    if os.path.exists(js):
        os.remove(js)
    try:
        run([path, "--jobs", "2", "--filter", pattern, f"--json={js}", "--timeout", "300"], cwd=tree, timeout=900)
    except subprocess.TimeoutExpired:
        return {"(all)": "TIMEOUT"}
    # (Criterion's report lists the tests the filter left out too, as skipped: keep the matching ones)
    return {t: st for t, (st, _) in (grade.parse_json(js) or {}).items() if fnmatch.fnmatchcase(t, pattern)}


def step_regions(only=None):
    """Each CPU region's marker names tests that fail in a student tree and pass once that one
    region is filled back (the other regions keep their stubs)."""
    build = os.environ.get("BUILD", "build")
    regions = student.check(REPO, quiet=True)
    ids = {r.id for r in regions}
    if only:
        unknown = sorted(set(only) - ids)
        if unknown:
            bad(f"regions: {', '.join(unknown)} is not a region")
            return
    # A region in a .c file is host code, tested on the CPU; kernels and launchers need a GPU.
    cpu = [r for r in regions if r.path.endswith(".c") and not r.kernel and (not only or r.id in only)]
    # Each region in the tree of an edition that stubs it (2025 first; 2026 for its own regions).
    done = set()
    for edition in sorted(student.EDITIONS):
        given = student.given_regions(REPO, edition)
        part = [r for r in cpu if r.id not in given and r.id not in done]
        done.update(r.id for r in part)
        if part:
            regions_in_tree(edition, part, regions, build)


def regions_in_tree(edition, cpu, regions, build):
    with tempfile.TemporaryDirectory() as tmp:
        dest = os.path.join(tmp, "student")
        make_tree(dest, edition=edition)
        # The CUDA files keep their solution (no CPU test can tell; nvcc need not run again) and
        # their time stamps, so the copied build/ stays up to date for them.
        for f in sorted({r.path for r in regions if not r.path.endswith(".c")}):
            shutil.copy2(os.path.join(REPO, f), os.path.join(dest, f))
        shutil.copytree(os.path.join(REPO, build), os.path.join(dest, "build"), symlinks=True)
        stages = lambda r: sorted({b[5:] for b, _ in marker_tests(r) if b != "test_common"} | {r.id[:2]})

        def build_stages(sts):
            rc, out = run(["make", "-j2", "BUILD=build"] + [f"build-{s}" for s in sts], cwd=dest, timeout=3000)
            if rc != 0:
                bad(f"regions: make {' '.join('build-' + s for s in sts)} failed in the student tree: {out[-1500:]}")
            return rc == 0

        if not build_stages(sorted({s for r in cpu for s in stages(r)})):
            return
        # every named test once in the student tree as built (before any region is filled back)
        before, n_ok, gpu_only = {}, 0, []
        for r in cpu:
            for bp in marker_tests(r):
                if bp not in before:
                    before[bp] = run_tests(dest, bp[0], bp[1], tmp)
        for r in cpu:
            pats = marker_tests(r)
            if not pats:
                bad(f"regions: {r.id}: its marker names no test")
                continue
            if all(st == "SKIPPED" for bp in pats for st in before[bp].values()) and all(before[bp] for bp in pats):
                gpu_only.append(r.id)
                continue
            problems = []
            for b, p in pats:
                res = before[(b, p)]
                if not res:
                    problems.append(f"{b} {p} matches no test")
                elif not any(st in ("FAILED", "CRASHED", "ERRORED", "TIMEOUT") for st in res.values()):
                    problems.append(f"{b} {p} does not fail in the student tree (the stub does not reach it)")
            written_after = f" (with {' '.join(r.needs)})" if r.needs else " alone"
            path = os.path.join(dest, r.path)
            stub_text = open(path, encoding="utf-8").read()
            saved = {f: open(os.path.join(dest, f), encoding="utf-8").read()
                     for f in {x.path for x in regions if x.id in r.needs} - {r.path}}
            with contextlib.redirect_stdout(io.StringIO()):
                student.fill(REPO, dest, {r.id} | set(r.needs))
            try:
                if not build_stages(stages(r)):
                    return
                for b, p in pats:
                    res = run_tests(dest, b, p, tmp)
                    failed = sorted(t for t, st in res.items() if st not in ("PASSED", "SKIPPED"))
                    if failed:
                        problems.append(f"{b} {p}: with {r.id} written{written_after}, {len(failed)} of {len(res)} still "
                                        f"fail ({', '.join(failed[:3])})")
                    elif res and not any(st == "PASSED" for st in res.values()):
                        problems.append(f"{b} {p}: every test skipped (no GPU): nothing checked")
            finally:
                with open(path, "w", encoding="utf-8") as fo:
                    fo.write(stub_text)
                for f, text in saved.items():
                    with open(os.path.join(dest, f), "w", encoding="utf-8") as fo:
                        fo.write(text)
            if problems:
                for x in problems:
                    bad(f"regions: {r.id} ({r.path}): {x}")
            else:
                n_ok += 1
                print(f"regions: {r.id}: {' '.join(b + ' ' + p for b, p in pats)}: fail with the stub, pass with it written{written_after}",
                      flush=True)
        print(f"regions: {n_ok} of {len(cpu)} CPU regions stubbed in the {edition} tree name the right tests"
              + (f"; GPU only (every named test skips here): {', '.join(gpu_only)}" if gpu_only else ""))


def make_flags(name):
    rc, out = run(["make", "-s", "--no-print-directory", "-pn", "deps"], timeout=120)
    m = re.search(rf"^{name} := (.*)$", out, re.M)
    return m.group(1).split() if m else []


def step_compile():
    cppflags = make_flags("CPPFLAGS")
    if not cppflags:
        bad("compile: could not read CPPFLAGS from the Makefile")
        return
    seen = {}  # a file stubbed alike in two editions compiles once
    for edition in sorted(student.EDITIONS):
        with tempfile.TemporaryDirectory() as tmp:
            dest = os.path.join(tmp, "s")
            make_tree(dest, edition=edition)
            cfiles = sorted({r.path for r in student.all_regions(dest) if r.path.endswith(".c")})
            n = 0
            for f in cfiles:
                text = open(os.path.join(dest, f), encoding="utf-8").read()
                if seen.get(f) == text:
                    continue
                seen[f], n = text, n + 1
                rc, out = run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-fopenmp",
                               "-fsyntax-only"] + cppflags + [f], cwd=dest, timeout=300)
                if rc != 0 or out.strip():
                    bad(f"compile: {edition}: the stubbed {f} does not compile cleanly: {out.strip()[:800]}")
            print(f"compile: {edition}: {n} stubbed C files compile with -Wall -Wextra -Werror")


def grade_of(tree, build, stages):
    out_dir = os.path.join(tree, build, "grade-selftest")
    rc, out = run([sys.executable, "scripts/grade.py", "--build", build, "--out", out_dir, "--stages", stages],
                  cwd=tree, timeout=3600)
    if rc != 0:
        bad(f"grade in {tree} failed (exit {rc}): {out[-2000:]}")
        return None
    return json.load(open(os.path.join(out_dir, "grade.json")))


def step_full():
    build = os.environ.get("BUILD", "build")
    stages = "01,02,03,04,05,06,07,08"  # 07 stands on 06's (stubbed) DDP: its rows list 06's regions
    with tempfile.TemporaryDirectory() as tmp:
        dest = os.path.join(tmp, "student")
        make_tree(dest)
        # The solution's objects come along (their time stamps are older than the stubbed files,
        # which make rebuilds): only the files with regions compile again.
        shutil.copytree(os.path.join(REPO, build), os.path.join(dest, "build"), symlinks=True)
        targets = [f"build-{s}" for s in stages.split(",")]
        rc, out = run(["make", "-j2", "BUILD=build"] + targets, cwd=dest, timeout=3000)
        noise = [x for x in out.splitlines() if x.strip() and not re.match(r"^(  (CC|NVCC|AR|LD) |[✓✗] |  GPU arch)", x)]
        if rc != 0 or noise:
            bad(f"full: the student tree does not build cleanly (exit {rc}): " + "\n".join(noise[:30]))
            return
        # its CPU tests fail with the task messages, not crashes
        rc, out = run(["build/02_weighted_sum/test_02", "--jobs", "2", "--filter", "ws_ref/*"], cwd=dest, timeout=600)
        if rc == 0 or "02: weighted_sum_forward_ref is yours to write — see 02_weighted_sum/README.md" not in out \
                or "Crashing: 0" not in out:
            bad(f"full: the student's ws_ref tests do not fail with the task message: {out[-1500:]}")
        # stage 07: a pure function (the padded layout), the accounting program, and an MPI
        # program whose stub fails on every rank (no rank left waiting in a collective)
        for filt, msg in (("zero_layout/*", "07: zero_shard_range is yours to write — see 07_zero/README.md §Padded layout"),
                          ("accounting_cli/defaults_print_the_handout_answers",
                           "07: acct_memory is yours to write — see 07_zero/ACCOUNTING.md §(a) Memory on one device"),
                          ("sharded_optim_course/both_toymodels_adamw_1_to_4_ranks_bitwise",
                           "07: zero_shard_range is yours to write — see 07_zero/README.md §Padded layout")):
            rc, out = run(["build/07_zero/test_07", "--jobs", "2", "--filter", filt], cwd=dest, timeout=600)
            if rc == 0 or msg not in out or "Crashing: 0" not in out:
                bad(f"full: the student's {filt} tests do not fail with the task message: {out[-1500:]}")
        rc, out = run(["build/08_pipeline/test_08", "--jobs", "2", "--filter", "schedule/every_schedule_is_valid"],
                      cwd=dest, timeout=600)
        if rc == 0 or "08: order_gpipe is yours to write — see 08_pipeline/README.md" not in out \
                or "Crashing: 0" not in out:
            bad(f"full: the student's schedule tests do not fail with the task message: {out[-1500:]}")
        sg = grade_of(dest, "build", stages)
        if sg:
            for p in sg["problems"]:
                if p["regions"] and p["earned"] != 0:
                    bad(f"full: student tree: {p['problem']} has regions but earned {p['earned']}")
                if p["regions"] and p["status"] == "pass":
                    bad(f"full: student tree: {p['problem']} has regions but passed")
                if not p["regions"] and p["status"] == "fail":
                    bad(f"full: student tree: {p['problem']} has no region but failed: {p['detail'][:3]}")
            if not sg["tasks_left"]:
                bad("full: the student grade lists no task left")
            print(f"full: student tree grades {sg['total']['earned']:g} / {sg['total']['possible']:g}")
    solg = grade_of(REPO, build, stages)
    if solg:
        for p in solg["problems"]:
            if p["status"] == "fail":
                bad(f"full: solution: {p['problem']} fails: {p['detail'][:3]}")
        print(f"full: the solution grades {solg['total']['earned']:g} / {solg['total']['possible']:g} "
              f"({solg['total']['not_run']:g} points not run here)")


def main():
    steps = {"markers": step_markers, "tree": step_tree, "stages": step_stages, "compile": step_compile,
             "docs": step_docs, "editions": step_editions, "full": step_full, "regions": step_regions, "quick": None}
    if len(sys.argv) < 2 or sys.argv[1] not in steps or (len(sys.argv) > 2 and sys.argv[1] != "regions") \
            or len(sys.argv) > 3:
        print(__doc__)
        return 2
    try:
        if sys.argv[1] == "quick":  # the cheap steps, in a few seconds: what make test runs
            for name in ("markers", "tree", "stages", "docs", "editions"):
                steps[name]()
        elif sys.argv[1] == "regions":
            step_regions({x for x in (sys.argv[2] if len(sys.argv) > 2 else "").replace(" ", ",").split(",") if x})
        else:
            steps[sys.argv[1]]()
    except student.MarkerError as err:  # the repository's own markers fail the check
        bad(f"{sys.argv[1]}: scripts/student.py check: {err}")
    if PROBLEMS:
        return 1
    print(f"{sys.argv[1]}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
