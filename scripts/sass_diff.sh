#!/usr/bin/env bash
# Proof that a change left the GPU machine code alone: builds the given .cu files at two
# revisions with the Makefile's nvcc flags and compares their SASS kernel by kernel.
#
#   scripts/sass_diff.sh [-a REV_A] [-b REV_B] [-o DIR] [-j N] [-c] [-m SED] file.cu ...
#     REV_A  the "before" revision (default HEAD)
#     REV_B  the "after" revision, or WORKTREE for the files as they are now (default WORKTREE)
#     DIR    where the sources, objects and .sass dumps go (default a fresh mktemp -d; kept)
#     -j N   parallel nvcc processes per side (default 2);  -c  compare the objects already in DIR
#     SED    a sed -E expression applied to side A's kernel names before they are paired, for a
#            change that renames kernels without meaning to change their code (a new template
#            parameter); every line it renames is printed. The code is still compared in full.
#     -p     pool: the kernels of all the named files are compared as one set (for code that moved
#            between files; a file may exist on one side only). The anonymous namespace's file
#            tag ("_GLOBAL__N__<id>_<file>_cu_<hash>") is masked on both sides, so a kernel that
#            moved keeps its name.
#   e.g. scripts/sass_diff.sh -a HEAD~1 -b HEAD 03_flashattn_fwd/flash_fwd_bf16_d64.cu
#        scripts/sass_diff.sh -m 's/ELb([01])EEEv9BwdParams/ELb\1ELi64EEEv9BwdParams/' 04_flashattn_bwd/flash_bwd_wgmma.cu
#
# Each revision is exported whole (git archive, or a copy of the work tree's tracked and
# untracked-not-ignored files) into its own folder, so an include that moved between the two is
# found at each revision. The objects are compiled in that folder with the SAME relative paths, so
# the only expected differences are line numbers of the debug line table, which `cuobjdump -sass`
# does not print, and the id nvcc gives each compilation's anonymous namespace: the 8 hex digits
# in "_GLOBAL__N__<id>_<file>_<hash>" change from one compile of the same file to the next (seen
# here: HEAD against an unchanged copy of itself), so they are masked; nothing else is. What is
# compared: the text of `cuobjdump -sass`, one section per kernel ("Function : <mangled name>"). A kernel that exists on one side only is a
# difference too. Prints a line per kernel that differs (DIFFERENT / only in A|B; VERBOSE=1: also
# "same" for each identical one), one per file and a summary;
# exit 0 only when every kernel of every file is identical.
#
# Needs: git, nvcc and cuobjdump (no GPU). ARCH (default sm_90a) and NVCC_FLAGS as in the
# Makefile. Keep NVCCFLAGS below in step with the Makefile's (it prints them for comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
A=HEAD B=WORKTREE OUTDIR="" JOBS=2 COMPARE_ONLY=0 MAP="" POOL=0
while getopts "a:b:o:j:m:pch" opt; do
  case $opt in
    p) POOL=1 ;;
    c) COMPARE_ONLY=1 ;;
    m) MAP=$OPTARG ;;
    a) A=$OPTARG ;;
    b) B=$OPTARG ;;
    o) OUTDIR=$OPTARG ;;
    j) JOBS=$OPTARG ;;
    *) sed -n '2,30p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { echo "sass_diff: name at least one .cu file (paths from the repository root)" >&2; exit 2; }
for f in "$@"; do
  case $f in *.cu) ;; *) echo "sass_diff: $f is not a .cu file" >&2; exit 2 ;; esac
done

NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
CUDA_HOME=${CUDA_HOME:-${NVCC%/bin/nvcc}}
# cuobjdump: $CUOBJDUMP, the PATH, the toolkit's, or the copy that ships inside Triton's wheel
# (some toolkit installs here have no cuobjdump; Triton's is a CUDA 13.x build that reads sm_90a).
if [ -z "${CUOBJDUMP:-}" ]; then
  CUOBJDUMP=$(command -v cuobjdump || true)
  [ -n "$CUOBJDUMP" ] || { [ -x "$CUDA_HOME/bin/cuobjdump" ] && CUOBJDUMP=$CUDA_HOME/bin/cuobjdump; } || true
  [ -n "$CUOBJDUMP" ] || CUOBJDUMP=$(python3 -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))' 2>/dev/null || true)
fi
[ -x "$CUOBJDUMP" ] || { echo "sass_diff: no cuobjdump (set CUOBJDUMP=/path/to/cuobjdump)" >&2; exit 2; }
ARCH=${ARCH:-sm_90a}
# The Makefile's NVCCFLAGS and CPPFLAGS (without -MMD -MP: no dependency files wanted here).
# HAVE_CUPTI/HAVE_NCCL only select host code; they are fixed so both sides agree.
FLAGS=(-std=c++17 -O3 -g -lineinfo "-gencode=arch=compute_${ARCH#sm_},code=$ARCH" -Xcompiler -Wall,-fPIC
       -I. "-I$CUDA_HOME/include" -DHAVE_CUPTI=0 -DHAVE_NCCL=0 ${NVCC_FLAGS:-})
echo "# nvcc: $NVCC ($("$NVCC" --version | tail -1)); cuobjdump: $CUOBJDUMP"
echo "# flags: ${FLAGS[*]}"
echo "# Makefile's NVCCFLAGS for comparison: $(sed -n 's/^NVCCFLAGS *:= *//p' Makefile)"

[ -n "$OUTDIR" ] || OUTDIR=$(mktemp -d /tmp/sass_diff.XXXXXX)
mkdir -p "$OUTDIR"
echo "# A = $A, B = $B, output in $OUTDIR"

export_rev() {  # $1 revision or WORKTREE, $2 folder
  rm -rf "$2"; mkdir -p "$2"
  if [ "$1" = WORKTREE ]; then
    git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents -- {} "$2"/ 2>/dev/null || true
  else
    git archive "$1" | tar -x -C "$2"
  fi
}

build_side() {  # $1 side name (A or B), $2 revision
  local src="$OUTDIR/$1/src" obj="$OUTDIR/$1/obj" rev=WORKTREE
  [ "$2" = WORKTREE ] || rev=$(git rev-parse --verify "$2^{commit}")
  # A revision built before into the same -o folder is reused (not the work tree: it changes).
  if [ "$rev" != WORKTREE ] && [ "$(cat "$OUTDIR/$1/rev" 2>/dev/null)" = "$rev" ] && \
     [ "$(cat "$OUTDIR/$1/files" 2>/dev/null)" = "${FILES[*]}" ]; then
    echo "# $1: reusing the objects of $rev in $obj"; return 0
  fi
  rm -f "$OUTDIR/$1/rev" "$OUTDIR/$1/files"
  export_rev "$2" "$src"
  mkdir -p "$obj"
  local pids=() f n=0
  for f in "${FILES[@]}"; do
    local o="$obj/${f//\//__}.o"
    if [ ! -f "$src/$f" ]; then [ "$POOL" = 1 ] || echo "sass_diff: $f does not exist at $2" >&2; touch "$o.missing"; continue; fi
    ( cd "$src" && "$NVCC" "${FLAGS[@]}" -c "$f" -o "$o" 2> "$o.log" ) || { echo "sass_diff: $f failed to compile at $2:" >&2; cat "$o.log" >&2; exit 1; } &
    pids+=($!); n=$((n + 1))
    if [ $((n % JOBS)) -eq 0 ]; then for p in "${pids[@]}"; do wait "$p"; done; pids=(); fi
  done
  for p in "${pids[@]}"; do wait "$p"; done
  echo "$rev" > "$OUTDIR/$1/rev"; echo "${FILES[*]}" > "$OUTDIR/$1/files"
}

FILES=("$@")
if [ "$COMPARE_ONLY" = 0 ]; then
  build_side A "$A"
  build_side B "$B"
fi

# Split one object's SASS into one file per kernel, named by the kernel's mangled name.
split_sass() {  # $1 object, $2 folder
  rm -rf "$2"; mkdir -p "$2"
  # Runs of blanks are squeezed: cuobjdump pads its columns to the longest kernel name, so a
  # renamed kernel (-m) shifts the padding of every line without changing a bit of the code.
  "$CUOBJDUMP" -sass "$1" | sed -E 's/_GLOBAL__N__[0-9a-f]{8}_/_GLOBAL__N__xxxxxxxx_/g; s/[[:blank:]]+/ /g' | awk -v dir="$2" '
    /Function : / { name = $NF; out = dir "/" name ".sass"; next }
    out != "" { print > out }'
}

total=0 same=0 bad=0
LOOP=("${FILES[@]}"); [ "$POOL" = 0 ] || LOOP=(pool)
for f in "${LOOP[@]}"; do
  key=${f//\//__}
  oa="$OUTDIR/A/obj/$key.o" ob="$OUTDIR/B/obj/$key.o"
  da="$OUTDIR/A/sass/$key" db="$OUTDIR/B/sass/$key"
  if [ "$POOL" = 1 ]; then  # every object of each side into one folder, file tags masked
    for side in A B; do
      d="$OUTDIR/$side/sass/pool"; rm -rf "$d"; mkdir -p "$d"
      for o in "$OUTDIR/$side"/obj/*.o; do
        [ -f "$o" ] || continue
        split_sass "$o" "$d.tmp"
        for k in $(ls "$d.tmp"); do
          n=$(printf '%s\n' "$k" | sed -E 's/_ZN[0-9]+_GLOBAL__N__x{8}_[0-9]+_[A-Za-z0-9_]+_cu_[0-9a-f]{8}/_ZN_ANON_/')
          mv "$d.tmp/$k" "$d/$n"
        done
        rm -rf "$d.tmp"
      done
    done
  else
  if [ ! -f "$oa" ] || [ ! -f "$ob" ]; then echo "MISSING   $f (not on both sides)"; bad=$((bad + 1)); continue; fi
  split_sass "$oa" "$da"; split_sass "$ob" "$db"
  fi
  if [ -n "$MAP" ]; then  # -m: side A's names as side B spells them
    for k in $(ls "$da"); do
      n=$(printf '%s\n' "${k%.sass}" | sed -E "$MAP")
      if [ "$n" != "${k%.sass}" ]; then mv "$da/$k" "$da/$n.sass"; echo "renamed A  ${k%.sass} -> $n"; fi
    done
  fi
  nk=0 ns=0
  for k in $( (ls "$da"; ls "$db") | sort -u); do
    total=$((total + 1)); nk=$((nk + 1))
    if [ ! -f "$da/$k" ]; then echo "only in B  $f  ${k%.sass}"; bad=$((bad + 1))
    elif [ ! -f "$db/$k" ]; then echo "only in A  $f  ${k%.sass}"; bad=$((bad + 1))
    elif cmp -s "$da/$k" "$db/$k"; then same=$((same + 1)); ns=$((ns + 1))
      [ "${VERBOSE:-0}" = 0 ] || echo "same       $f  ${k%.sass}"
    else echo "DIFFERENT  $f  ${k%.sass}  (diff $da/$k $db/$k)"; bad=$((bad + 1)); fi
  done
  ni=0; [ "$nk" -eq 0 ] || ni=$(cat "$da"/*.sass | grep -c '/\*[0-9a-f]\{4\}\*/' || true)
  echo "$f: $ns of $nk kernels identical ($ni SASS instructions at A)"
done
echo "# $same of $total kernels identical, $bad differences"
[ "$bad" -eq 0 ]
