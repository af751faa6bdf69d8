#!/usr/bin/env bash
# Packs a build's programs and test binaries, stripped, into one xz tarball to carry to a GPU
# machine that should spend no time compiling (the lab's device scripts, lab/device/device_h100.sh and lab/05_collectives/device_dist.sh, run them
# from B=build-dev after `tar xJf`). The CUDA code stays: strip removes host symbols only.
#   scripts/pack_build.sh [BUILD] [OUT]      (defaults: build, .dev/bin.tar.xz)
# Then: carry the tarball's folder (git-ignored, e.g. via .git/info/exclude) and .criterion, and
# start the device command with `tar xJf .dev/bin.tar.xz`.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-build}
out=${2:-.dev/bin.tar.xz}
[ -d "$src" ] || { echo "pack_build: no build directory '$src' (run make first)" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
n=0
while IFS= read -r f; do
  rel=${f#"$src"/}
  mkdir -p "$stage/build-dev/$(dirname "$rel")"
  strip -o "$stage/build-dev/$rel" "$f"
  n=$((n + 1))
done < <(find "$src" -maxdepth 2 -type f -perm -u+x)
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
(cd "$stage" && tar cf - build-dev) | xz -T2 -6 > "$tmp"
mv "$tmp" "$out"  # never a half-written tarball under the real name
echo "pack_build: $n programs from $src -> $out ($(du -h "$out" | cut -f1))"
