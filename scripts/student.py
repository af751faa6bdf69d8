#!/usr/bin/env python3
"""The student edition of the workbook: solution regions, the student tree, the marker check.

A solution region is the body of one function, between two one-line comments that the compiler
ignores:

    void flash_forward_cpu(const float* q, ..., int Bk) {
        // STUDENT-BEGIN(03.flash_fwd_cpu): task text | see 03_flashattn_fwd/README.md §Algorithm 1 | test: test_03 ref/tiled_*
        ... the solution ...
        // STUDENT-END(03.flash_fwd_cpu)
    }

The id is "NN.name" (NN: the stage the file lives in). The BEGIN line carries three fields split
by " | ": what to implement (the names from the README's maths), "see <where it is explained>"
and "test: <the tests that check it>", and an optional fourth, "uses: helper helper", naming the
file's static helpers that only the solution calls (the stub mentions them, so that no compiler
warns about an unused function, and the student learns what is there to call; in CUDA files also C::member or kernel<D,BQ>: a
launcher's stub names its kernel's instance, whose stub then names the __device__ helpers, as nvcc
warns about unreferenced ones of the file (#177-D), and no reference in an uninstantiated template
counts), and an optional "needs: NN.x NN.y", the other regions that its tests
also need (make check-regions fills them back with it). The BEGIN line
follows the line that opens the function body; the END line precedes the line that closes it.

In the student tree a region holds the same two markers around a stub that compiles without a
warning and fails cleanly at run time:
    host function:  (void)param; ...  (void)helper; ...  fail("%s", "03: flash_forward_cpu is yours to write — see ...");
    __global__ kernel or __device__ function:  (void)param; ...  (device code cannot call fail():
                    the kernel's launcher is a region too and fails before launching)

Every __global__ kernel of a released stage file (a .cu or .cuh of a numbered stage folder; lab/
is never released) is either inside a region or listed in scripts/student_regions.tsv as
'given<TAB>file<TAB>kernel<TAB>why' (a helper the student does not write): the check refuses any
other, in a file with regions or without.

Commands:
    student.py check [--root DIR]                  the markers are well formed (make check-markers)
    student.py make DEST [--stages 01,02] [--with-lab] [--edition 2025|2026]
                                                   write the student tree (make student DEST=...);
                                                   lab/ and measured/ logs stay out unless --with-lab
    student.py fill STUDENT_DIR [--root DIR] [--regions id,id]
                                                   put the solution back into a student tree's regions
                                                   (all of them, or only those named)
    student.py list [--root DIR]                   the regions, one per line (id, file, function, task)
    student.py table [--write FILE | --check FILE] the region table of INSTRUCTORS.md (Markdown),
                                                   printed, written between its markers, or compared

Stages not released (numbered above the highest in --stages) are left out of the student tree;
earlier stages not in --stages are copied with their solutions (they were handed out before).

Editions: the course's handout of 2025 (scripts/grade_map.tsv, the default) or of 2026
(scripts/grade_map_2026.tsv, make student EDITION=2026). A region that some other edition's map
lists and this edition's map does not (only the other handout's problems need it) stays given
code, markers and all, in this edition's tree; every other region of a released stage is stubbed.
The tree's .student-edition names the edition, and make grade there grades that edition.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE_EXT = (".c", ".h", ".cu", ".cuh")
MARKED_STAGES = ("01", "02", "03", "04", "05", "06", "07", "08", "09", "10")
# Files others own: never marked (the checker refuses markers there).
UNMARKABLE = re.compile(r"^(11_train/|common/model_cpu|common/adamw|common/model_gpu|"
                        r"common/comm|common/profiler\.|06_ddp/ddp_train_main\.c)")
BEGIN_RE = re.compile(r"^(\s*)// STUDENT-BEGIN\(([^)]*)\)(.*)$")
END_RE = re.compile(r"^(\s*)// STUDENT-END\(([^)]*)\)\s*$")
ANY_MARK_RE = re.compile(r"STUDENT-(BEGIN|END)\b")
ID_RE = re.compile(r"^(\d\d)\.[a-z0-9_]+$")
MANIFEST = "scripts/student_regions.tsv"
# The course's handouts this workbook grades, each with its grade map (scripts/grade.py).
EDITIONS = {"2025": "scripts/grade_map.tsv", "2026": "scripts/grade_map_2026.tsv"}


def map_regions(root, edition):
    """The region ids that an edition's grade map lists (its 6th column), as a set."""
    out = set()
    path = os.path.join(root, EDITIONS[edition])
    if not os.path.exists(path):
        return out
    for line in open(path, encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.rstrip("\n").split("\t")
        if len(f) >= 6 and f[5].strip() != "-":
            out.update(f[5].split())
    return out


def given_regions(root, edition):
    """The regions only other editions' problems need: listed by another edition's map, not by
    this one's. They stay solved (given code) in this edition's student tree."""
    others = set()
    for e in EDITIONS:
        if e != edition:
            others |= map_regions(root, e)
    return others - map_regions(root, edition)


def edition_of_tree(root):
    """The edition a student tree's .student-edition names ('edition: 2026'), or None."""
    try:
        for line in open(os.path.join(root, ".student-edition"), encoding="utf-8"):
            if line.startswith("edition:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


class MarkerError(Exception):
    pass


def rel_files(root):
    """The files of the working tree: tracked and untracked-but-not-ignored (git), else a walk."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"],
                             check=True, capture_output=True).stdout.decode()
        files = [f for f in out.split("\0") if f and os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if x != ".git" and not x.startswith("build") and x != "results"
                       and x != "__pycache__"]
            for n in names:
                files.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(set(files))


def stage_of(path):
    m = re.match(r"^(\d\d)_", path)
    return m.group(1) if m else None


def strip_comments(s):
    s = re.sub(r"/\*.*?\*/", " ", s, flags=re.S)
    return re.sub(r"//[^\n]*", " ", s)


def signature(lines, open_idx):
    """The declaration that ends on lines[open_idx] (the line with the body's '{'): its text."""
    i = open_idx
    sig = [lines[i]]
    while i > 0 and (lines[i][:1].isspace() or lines[i][:1] == ""):
        i -= 1
        sig.insert(0, lines[i])
    j = i - 1  # column-0 lines before it that belong to it: "template <...>", "__global__ void ..."
    while j >= 0:
        t = lines[j].rstrip()
        if not t or t[:1].isspace() or t.startswith(("//", "#", "/*", "*")) or t.endswith((";", "}", "*/", "{")):
            break
        sig.insert(0, lines[j])
        j -= 1
    return "".join(sig)


def parse_function(sig_text):
    """(name, [parameter names], is_kernel) of a function definition's head."""
    s = strip_comments(sig_text)
    s = s[: s.rfind("{")] if "{" in s else s
    end = s.rfind(")")
    if end < 0:
        raise MarkerError("no parameter list before the region")
    depth, k = 0, end
    while k >= 0:
        if s[k] == ")":
            depth += 1
        elif s[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    if k < 0:
        raise MarkerError("unbalanced parentheses before the region")
    params_text = s[k + 1:end]
    m = re.search(r"([A-Za-z_][A-Za-z0-9_:]*)\s*(<[^()]*>)?\s*$", s[:k])
    if not m:
        raise MarkerError("no function name before the region")
    name = m.group(1).split("::")[-1]
    params, depth, cur = [], 0, ""
    for ch in params_text:
        if ch in "(<[":
            depth += 1
        elif ch in ")>]":
            depth -= 1
        if ch == "," and depth == 0:
            params.append(cur)
            cur = ""
        else:
            cur += ch
    params.append(cur)
    names = []
    for p in params:
        p = re.sub(r"\[[^\]]*\]", "", p.split("=")[0]).strip()
        if not p or p == "void" or p == "...":
            continue
        ids = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", p)
        if len(ids) >= 2:
            names.append(ids[-1])
    # Device code (a kernel, or a __device__ function that is not also __host__) cannot call fail().
    device = "__global__" in s or ("__device__" in s and "__host__" not in s)
    return name, names, device


def parse_task(rest):
    """': text | see X | test: Y [| uses: a b] [| needs: NN.x NN.y]' -> (text, see, test, [helpers],
    [region ids])."""
    rest = rest.strip()
    if not rest.startswith(":"):
        raise MarkerError("the BEGIN marker needs ': task | see ... | test: ...' after the id")
    fields = [f.strip() for f in rest[1:].split(" | ")]
    extra = {}
    for f in fields[3:]:
        key = f.split(":", 1)[0]
        if key not in ("uses", "needs") or not f.startswith(key + ": ") or key in extra:
            extra = None
            break
        extra[key] = f[len(key) + 2:]
    if len(fields) < 3 or extra is None or not fields[1].startswith("see ") or not fields[2].startswith("test: "):
        raise MarkerError("the BEGIN marker's text must be 'task | see <where> | test: <tests>' "
                          "[' | uses: <helpers>'] [' | needs: <region ids>']")
    if not fields[0]:
        raise MarkerError("the task text is empty")
    uses = extra.get("uses", "").split()
    for u in uses:  # a name, C::member, or a kernel template's instance kernel<D,BQ> (no spaces)
        if not re.fullmatch(r"[A-Za-z_]\w*(::[A-Za-z_]\w*)*(<[\w:,]+>)?", u):
            raise MarkerError(f"'uses: {extra['uses']}': '{u}' is not a function name")
    needs = extra.get("needs", "").split()
    for x in needs:
        if not ID_RE.match(x):
            raise MarkerError(f"'needs: {extra['needs']}': '{x}' is not a region id NN.name")
    return fields[0], fields[1][4:], fields[2][6:], uses, needs


class Region:
    def __init__(self, path, rid, begin, end, indent, task, see, test, uses, func, params, kernel, begin_line,
                 needs=()):
        self.path, self.id, self.begin, self.end, self.indent = path, rid, begin, end, indent
        self.task, self.see, self.test, self.uses, self.needs = task, see, test, uses, list(needs)
        self.func, self.params, self.kernel, self.begin_line = func, params, kernel, begin_line

    def message(self):
        return f"{self.id[:2]}: {self.func} is yours to write — see {self.see}"

    def stub(self):
        ind = self.indent
        out = [self.begin_line]
        if self.params:
            out.append(ind + " ".join(f"(void){p};" for p in self.params) + "\n")
        if self.uses:
            out.append(ind + " ".join(f"(void){u};" for u in self.uses) + "  // helpers of this file to call\n")
        if self.kernel:
            out.append(ind + "// (device code: the launcher of its kernel fails before it is ever launched)\n")
        else:
            msg = self.message().replace("\\", "\\\\").replace('"', '\\"')
            out.append(ind + f'fail("%s", "{msg}");\n')
        out.append(f"{ind}// STUDENT-END({self.id})\n")
        return out


def find_regions(path, text):
    """The regions of one file (a list of Region), or MarkerError naming file:line."""
    lines = text.splitlines(keepends=True)
    regions, open_r, ids = [], None, set()
    for n, line in enumerate(lines):
        where = f"{path}:{n + 1}"
        b, e = BEGIN_RE.match(line), END_RE.match(line)
        if not b and not e:
            if ANY_MARK_RE.search(line) and "STUDENT-BEGIN(id)" not in line:
                raise MarkerError(f"{where}: a malformed marker (want '// STUDENT-BEGIN(NN.name): ...' "
                                  f"or '// STUDENT-END(NN.name)' alone on its line)")
            continue
        if b:
            if open_r is not None:
                raise MarkerError(f"{where}: STUDENT-BEGIN({b.group(2)}) inside region {open_r[0]} "
                                  f"(opened at line {open_r[1] + 1}): regions do not nest")
            rid = b.group(2)
            if not ID_RE.match(rid):
                raise MarkerError(f"{where}: region id '{rid}' is not NN.name (lower case, digits, _)")
            st = stage_of(path)
            if rid[:2] != st:
                raise MarkerError(f"{where}: region {rid} is in {path}, whose stage is {st or 'none'}: "
                                  f"the id starts with the file's stage number")
            if rid in ids:
                raise MarkerError(f"{where}: region id {rid} is used twice in this file")
            if n == 0 or not lines[n - 1].rstrip().endswith("{"):
                raise MarkerError(f"{where}: STUDENT-BEGIN must follow the line that opens a function body")
            try:
                task = parse_task(b.group(3))
                func, params, kernel = parse_function(signature(lines, n - 1))
            except MarkerError as err:
                raise MarkerError(f"{where}: {err}")
            open_r = (rid, n, b.group(1), task, func, params, kernel)
        else:
            if open_r is None:
                raise MarkerError(f"{where}: STUDENT-END({e.group(2)}) without a STUDENT-BEGIN")
            if e.group(2) != open_r[0]:
                raise MarkerError(f"{where}: STUDENT-END({e.group(2)}) closes region {open_r[0]} "
                                  f"(opened at line {open_r[1] + 1})")
            if n + 1 >= len(lines) or lines[n + 1].strip() != "}":
                raise MarkerError(f"{where}: STUDENT-END must precede the line '}}' that closes the function")
            rid, bn, ind, (task, see, test, uses, needs), func, params, kernel = open_r
            brace = lines[n + 1][: len(lines[n + 1]) - len(lines[n + 1].lstrip())]
            if not (ind.startswith(brace) and len(ind) > len(brace)):
                raise MarkerError(f"{where}: the region's closing brace is not its function's")
            if e.group(1) != ind:
                raise MarkerError(f"{where}: STUDENT-END is not indented like its STUDENT-BEGIN")
            regions.append(Region(path, rid, bn, n, ind, task, see, test, uses, func, params, kernel, lines[bn],
                                  needs))
            ids.add(rid)
            open_r = None
    if open_r is not None:
        raise MarkerError(f"{path}:{open_r[1] + 1}: region {open_r[0]} is never closed (no STUDENT-END)")
    return regions, lines


def read_manifest(root, reasons=None):
    """({id: (file, function)}, {(file, kernel) given}) from scripts/student_regions.tsv; `reasons`
    (a dict), when given, receives {(file, kernel): why} of the given rows."""
    rows, given = {}, set()
    p = os.path.join(root, MANIFEST)
    if not os.path.exists(p):
        return rows, given
    for n, line in enumerate(open(p, encoding="utf-8")):
        if not line.strip() or line.startswith("#"):
            continue
        f = line.rstrip("\n").split("\t")
        if len(f) < 3:
            raise MarkerError(f"{MANIFEST}:{n + 1}: want 'id<TAB>file<TAB>function'")
        if f[0] == GIVEN_KERNELS_OK:
            given.add((f[1], f[2]))
            if reasons is not None:
                reasons[(f[1], f[2])] = f[3].strip() if len(f) > 3 else ""
        else:
            rows[f[0]] = (f[1], f[2])
    return rows, given


GIVEN_KERNELS_OK = "given"


def all_regions(root, files=None):
    """Every region of the tree, after the full check; MarkerError on the first problem."""
    files = files if files is not None else rel_files(root)
    found, seen = [], {}
    for f in files:
        if not f.endswith(SOURCE_EXT):
            continue
        text = open(os.path.join(root, f), encoding="utf-8", errors="replace").read()
        if "STUDENT-" not in text:
            continue
        if UNMARKABLE.match(f) or (stage_of(f) and stage_of(f) not in MARKED_STAGES):
            if any(BEGIN_RE.match(x) for x in text.splitlines()):
                raise MarkerError(f"{f}: regions are marked only in stages {MARKED_STAGES[0]}-"
                                  f"{MARKED_STAGES[-1]} and not in files others own")
        regions, lines = find_regions(f, text)
        for r in regions:
            if r.id in seen:
                raise MarkerError(f"{f}:{r.begin + 1}: region id {r.id} is also used in {seen[r.id]}")
            seen[r.id] = f
            if not r.kernel and "common/check.h" not in text and f.endswith((".c", ".cu")):
                raise MarkerError(f"{f}:{r.begin + 1}: the stub calls fail(): include \"common/check.h\"")
        found.extend(regions)
    return found


RELEASED_KERNEL_FILE = re.compile(r"^\d\d_[^/]+/(?!(.*/)?measured/).*\.(cu|cuh)$")


def kernels_of(lines):
    """[(line index, name, body line index)] of the __global__ kernel definitions of a file."""
    out = []
    for n, line in enumerate(lines):
        if "__global__" not in strip_comments(line):
            continue
        m = n  # the kernel's head runs from here to the line that opens its body
        while m < len(lines) and not lines[m].rstrip().endswith("{"):
            if strip_comments(lines[m]).rstrip().endswith(";"):
                break
            m += 1
        if m >= len(lines) or not lines[m].rstrip().endswith("{"):
            continue  # a declaration
        try:
            name = parse_function("".join(lines[n:m + 1]))[0]
        except MarkerError:
            continue
        out.append((n, name, m + 1))
    return out


def unmarked_kernels(root, files, regions, given):
    """One line per __global__ kernel of a released stage file (every .cu/.cuh of a numbered stage
    folder, with regions or without) that is neither inside a region nor listed as given, and per
    given row that names no kernel of its file."""
    bad, found = [], set()
    for f in files:
        if not RELEASED_KERNEL_FILE.match(f):
            continue
        lines = open(os.path.join(root, f), encoding="utf-8", errors="replace").read().splitlines(keepends=True)
        inside = set()
        for r in (x for x in regions if x.path == f):
            inside.update(range(r.begin, r.end + 1))
        for n, name, body in kernels_of(lines):
            found.add((f, name))
            if n in inside or body in inside or (f, name) in given:
                continue
            bad.append(f"{f}:{n + 1}: kernel {name} is neither in a region nor given (it would reach "
                       f"the student tree solved): mark its body as a region (STUDENT-BEGIN/END and a row "
                       f"in {MANIFEST}) or list it there as '{GIVEN_KERNELS_OK}<TAB>{f}<TAB>{name}<TAB>why'")
    for f, name in sorted(given):
        if f in files and (f, name) not in found:
            bad.append(f"{MANIFEST}: '{GIVEN_KERNELS_OK}' row {name} in {f}: the file has no such __global__ kernel")
    return bad


def check(root, files=None, quiet=False):
    """The marker check: well formed, every manifest row marked, every marked region listed, and no
    solution-like code outside a region: every __global__ kernel of a released stage file is in a
    region or listed as given. Kernel problems are all reported, one line each, then MarkerError."""
    all_files = files if files is not None else rel_files(root)
    regions = all_regions(root, all_files)
    manifest, given = read_manifest(root)
    by_id = {r.id: r for r in regions}
    for rid, (f, func) in manifest.items():
        r = by_id.get(rid)
        if r is None and not os.path.exists(os.path.join(root, f)):
            continue  # a stage not released in this (student) tree
        if r is None:
            raise MarkerError(f"{MANIFEST}: region {rid} ({func} in {f}) is not marked in the source: "
                              f"the solution would reach the student tree")
        if r.path != f or r.func != func:
            raise MarkerError(f"{MANIFEST}: region {rid} is listed as {func} in {f} but marks {r.func} "
                              f"in {r.path}")
    for r in regions:
        if r.id not in manifest:
            raise MarkerError(f"{r.path}:{r.begin + 1}: region {r.id} ({r.func}) is not listed in {MANIFEST}")
        for x in r.needs:
            if x not in by_id or x == r.id:
                raise MarkerError(f"{r.path}:{r.begin + 1}: region {r.id}: 'needs: {x}' names no other region "
                                  f"(needs: the other regions its tests also need)")
    files_with = sorted({r.path for r in regions})
    bad = unmarked_kernels(root, all_files, regions, given)
    if bad:
        for line in bad[:-1]:
            print(f"student.py: error: {line}", file=sys.stderr)
        raise MarkerError(bad[-1] + (f"  ({len(bad)} problems)" if len(bad) > 1 else ""))
    if not quiet:
        print(f"markers: {len(regions)} regions in {len(files_with)} files, well formed; "
              f"{len(given)} kernels given; every kernel of a released stage file is one or the other")
    return regions


def parse_stages(s):
    if not s:
        return None
    out = []
    for x in s.replace(" ", ",").split(","):
        if not x:
            continue
        if not re.fullmatch(r"\d{1,2}", x) or not 1 <= int(x) <= int(MARKED_STAGES[-1]):
            raise SystemExit(f"student.py: error: --stages: '{x}' is not a stage number 01..{MARKED_STAGES[-1]}")
        out.append(f"{int(x):02d}")
    return sorted(set(out))


def student_text(lines, regions):
    out, k = [], 0
    for r in sorted(regions, key=lambda r: r.begin):
        out.extend(lines[k:r.begin])
        out.extend(r.stub())
        k = r.end + 1
    out.extend(lines[k:])
    return "".join(out)


NOT_HANDED_OUT = re.compile(r"^lab/|(^|/)measured/")


def make_tree(root, dest, stages, with_lab=False, edition="2025"):
    if edition not in EDITIONS:
        raise SystemExit(f"student.py: error: --edition: '{edition}' is not an edition; "
                         f"allowed: {', '.join(sorted(EDITIONS))}")
    given = given_regions(root, edition)
    regions = [r for r in check(root, quiet=True) if r.id not in given]
    if os.path.exists(dest) and os.listdir(dest):
        raise SystemExit(f"student.py: error: {dest} exists and is not empty (give a new directory)")
    files = rel_files(root)
    released = stages or sorted({stage_of(f) for f in files if stage_of(f)})
    top = max(released)
    by_file = {}
    for r in regions:
        by_file.setdefault(r.path, []).append(r)
    os.makedirs(dest, exist_ok=True)
    n_stub, n_files, left_out, n_lab = 0, 0, set(), 0
    for f in files:
        st = stage_of(f)
        if not with_lab and NOT_HANDED_OUT.search(f):
            n_lab += 1  # the lab notebook and the raw measurement logs: never needed to learn or pass
            continue
        if st and st > top:
            left_out.add(f.split("/")[0])
            continue
        src, dst = os.path.join(root, f), os.path.join(dest, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        rs = by_file.get(f)
        if rs and st in released:
            lines = open(src, encoding="utf-8").read().splitlines(keepends=True)
            with open(dst, "w", encoding="utf-8") as out:
                out.write(student_text(lines, rs))
            shutil.copymode(src, dst)
            n_stub += len(rs)
        else:
            shutil.copy2(src, dst)  # keeps the time stamp: a copied build/ stays up to date for it
        n_files += 1
    # No solution line survives: every line of a region that appears nowhere else in its file
    # must be gone from the student copy of that file.
    for f, rs in by_file.items():
        if stage_of(f) not in released:
            continue
        lines = open(os.path.join(root, f), encoding="utf-8").read().splitlines()
        inside = set()
        for r in rs:
            inside.update(range(r.begin + 1, r.end))
        outside = {lines[i].strip() for i in range(len(lines)) if i not in inside}
        got = set(x.strip() for x in open(os.path.join(dest, f), encoding="utf-8").read().splitlines())
        for i in sorted(inside):
            s = lines[i].strip()
            if len(s) > 3 and s not in outside and s in got:
                raise SystemExit(f"student.py: error: a solution line survived in {f}: {s}")
    with open(os.path.join(dest, ".student-edition"), "w") as out:
        out.write("released stages: " + ",".join(released) + "\n" + f"edition: {edition}\n")
    print(f"student tree: {dest}")
    print(f"  edition: {edition} ({EDITIONS[edition]}); stages released: {', '.join(released)}; "
          f"{n_stub} regions replaced by stubs; {n_files} files copied (no .git, no build/)")
    if given:
        print(f"  kept as given code (only another edition's problems need them): {len(given)} regions")
    if left_out:
        print(f"  left out (not released yet): {', '.join(sorted(left_out))}")
    if n_lab:
        print(f"  left out (lab/ and measured/ logs; --with-lab keeps them): {n_lab} files")
    print(f"  next: make -C {dest} grade   # the stubs fail, naming each task; results/grade.md")
    return 0


def fill(root, student, only=None):
    """Put the solution's region bodies back into a student tree (the round trip); `only`: a set
    of region ids, the others keep their stubs."""
    sol = {r.id: r for r in all_regions(root)}
    if only:
        unknown = sorted(set(only) - set(sol))
        if unknown:
            raise SystemExit(f"student.py: error: --regions: {', '.join(unknown)} is not a region of "
                             f"{root}; the ids are those of 'student.py list'")
    n = 0
    for f in rel_files(student) if os.path.isdir(os.path.join(student, ".git")) else _walk(student):
        if not f.endswith(SOURCE_EXT):
            continue
        p = os.path.join(student, f)
        text = open(p, encoding="utf-8").read()
        if "STUDENT-BEGIN" not in text:
            continue
        regions, lines = find_regions(f, text)
        if only and not any(r.id in only for r in regions):
            continue
        out, k = [], 0
        for r in regions:
            if only and r.id not in only:
                continue
            s = sol.get(r.id)
            if s is None:
                raise SystemExit(f"student.py: error: {f}: region {r.id} is not in the solution at {root}")
            slines = open(os.path.join(root, s.path), encoding="utf-8").read().splitlines(keepends=True)
            out.extend(lines[k:r.begin])
            out.extend(slines[s.begin:s.end + 1])
            k = r.end + 1
            n += 1
        out.extend(lines[k:])
        st = os.stat(p)
        with open(p, "w", encoding="utf-8") as fo:
            fo.write("".join(out))
        os.chmod(p, st.st_mode)
    print(f"filled {n} regions from {root}")


def region_table(root):
    """INSTRUCTORS.md's region table, from the markers and scripts/student_regions.tsv."""
    regions = all_regions(root)  # the table needs the markers, not the kernel check
    reasons = {}
    read_manifest(root, reasons)
    files = sorted({r.path for r in regions})
    out = [f"{len(regions)} regions in {len(files)} files; {len(reasons)} kernels given. The tests each "
           f"marker names: scripts/student.py list.", "",
           "| region | file (in its stage) | function |", "|---|---|---|"]
    for r in sorted(regions, key=lambda r: (r.id[:2], r.path, r.begin)):
        out.append(f"| {r.id} | {r.path.split('/', 1)[1]} | {r.func} |")
    out += ["", "| given kernel | file | why it is given |", "|---|---|---|"]
    for (f, k), why in sorted(reasons.items()):
        out.append(f"| {k} | {f} | {why or '—'} |")
    return "\n".join(out) + "\n"


def splice(path, name, body, write, prog):
    """Put `body` between '<!-- generated: NAME -->' and '<!-- /generated -->' in the file at
    `path` (write), or compare (check): 0 when it holds, 1 (one line) when the file drifted."""
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as err:
        print(f"{prog}: error: cannot read {path}: {err.strerror}; give the file with the markers", file=sys.stderr)
        return 2
    begin = f"<!-- generated: {name} -->"  # the line may add a note before '-->'
    m = re.search(r"<!-- generated: " + re.escape(name) + r"(?=\s)[^\n]*-->\n(.*?)<!-- /generated -->", text, re.S)
    if not m:
        print(f"{prog}: error: {path} has no '{begin}' ... '<!-- /generated -->' block; "
              f"add the two marker lines where the table goes", file=sys.stderr)
        return 2
    if m.group(1) == body:
        return 0
    if not write:
        print(f"{prog}: {path}: the {name} table differs from what the TSV gives: run make instructors",
              file=sys.stderr)
        return 1
    with open(path + ".tmp", "w", encoding="utf-8") as fo:
        fo.write(text[:m.start(1)] + body + text[m.end(1):])
    os.replace(path + ".tmp", path)
    print(f"{prog}: {path}: the {name} table written")
    return 0


def _walk(root):
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith("build") and x not in (".git", "results")]
        out.extend(os.path.relpath(os.path.join(d, n), root) for n in names)
    return sorted(out)


def main(argv):
    ap = argparse.ArgumentParser(prog="student.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="check the markers (nesting, closing, ids, the manifest)")
    c.add_argument("--root", default=REPO)
    c.add_argument("files", nargs="*", help="only these files (relative to --root)")
    m = sub.add_parser("make", help="write the student tree")
    m.add_argument("dest")
    m.add_argument("--stages", default="", help="stages to release, e.g. 01,02,03 (default: all)")
    m.add_argument("--root", default=REPO)
    m.add_argument("--with-lab", action="store_true", help="copy lab/ and the measured/ logs too")
    m.add_argument("--edition", default="2025", help="the handout: 2025 (default) or 2026")
    f = sub.add_parser("fill", help="put the solution back into a student tree's regions")
    f.add_argument("student")
    f.add_argument("--root", default=REPO)
    f.add_argument("--regions", default="", help="only these regions, e.g. 02.forward_ref,02.backward_ref")
    ls = sub.add_parser("list", help="the regions: id, file, function, task")
    ls.add_argument("--root", default=REPO)
    t = sub.add_parser("table", help="INSTRUCTORS.md's region table")
    t.add_argument("--root", default=REPO)
    g = t.add_mutually_exclusive_group()
    g.add_argument("--write", metavar="FILE", help="write it between FILE's '<!-- generated: regions -->' markers")
    g.add_argument("--check", metavar="FILE", help="exit 1 when FILE's table differs from it")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "check":
            check(a.root, a.files or None)
        elif a.cmd == "make":
            if a.edition not in EDITIONS:
                print(f"student.py: error: --edition: '{a.edition}' is not an edition; allowed: "
                      f"{', '.join(sorted(EDITIONS))}", file=sys.stderr)
                return 2
            return make_tree(a.root, a.dest, parse_stages(a.stages), a.with_lab, a.edition)
        elif a.cmd == "fill":
            fill(a.root, a.student, {x for x in a.regions.split(",") if x} or None)
        elif a.cmd == "table":
            body = region_table(a.root)
            if not (a.write or a.check):
                print(body, end="")
                return 0
            return splice(a.write or a.check, "regions", body, bool(a.write), "student.py table")
        elif a.cmd == "list":
            for r in all_regions(a.root):
                print(f"{r.id}\t{r.path}\t{r.func}\t{r.task}\t{r.see}\t{r.test}")
    except MarkerError as err:
        print(f"student.py: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
