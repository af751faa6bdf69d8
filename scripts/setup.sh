#!/usr/bin/env bash
# Installs what this workbook needs and is missing, and nothing else. Idempotent: when
# everything is present it only checks (well under a second).
#   scripts/setup.sh          check/install for `make test` and `make run`
# Needs (Debian/Ubuntu packages):  Criterion (libcriterion-dev)   required to build the tests
#                                  python3                        required by the test runner
#                                  OpenMPI (libopenmpi-dev, openmpi-bin)   stages 05-07
#                                  gnuplot (gnuplot-nox)          PNG plots of the benchmarks
#                                  clang + libclang-rt            `make fuzz` only (optional)
# A Criterion bundle in CRITERION_HOME (headers + libraries; see README) counts as installed.
# Without apt or without network (the GPU machine) nothing is installed: the script says what
# is missing and fails only if a required piece is missing. SETUP_SKIP=1 skips everything.
set -u
[ "${SETUP_SKIP:-0}" = 1 ] && exit 0

have_criterion() {
  if [ -n "${CRITERION_HOME:-}" ]; then [ -f "$CRITERION_HOME/include/criterion/criterion.h" ]; return; fi
  [ -f /usr/include/criterion/criterion.h ] || [ -f /usr/local/include/criterion/criterion.h ]
}
have_cmd() { command -v "$1" >/dev/null 2>&1; }

missing_req=(); missing_opt=(); pkgs=()
have_criterion || { missing_req+=("Criterion"); pkgs+=(libcriterion-dev); }
have_cmd python3 || { missing_req+=("python3"); pkgs+=(python3); }
have_cmd mpicc   || { missing_opt+=("OpenMPI"); pkgs+=(libopenmpi-dev openmpi-bin); }
have_cmd gnuplot || { missing_opt+=("gnuplot"); pkgs+=(gnuplot-nox); }

[ ${#pkgs[@]} -eq 0 ] && exit 0

echo "setup: missing: ${missing_req[*]:-} ${missing_opt[*]:-}; installing ${pkgs[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if have_cmd sudo; then sudo="sudo"; else echo "setup: not root and no sudo: cannot install ${pkgs[*]}"; fi
fi
# Is a package mirror reachable at all? (The GPU machine has no network: don't wait for apt.)
mirror_reachable() {
  # hosts of the ACTIVE sources only (apt ignores files not named *.list or *.sources)
  local files hosts h
  files=$(ls /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null)
  [ -z "$files" ] && return 0   # unknown: let apt try
  hosts=$(grep -hoE '^(deb|URIs:)[^#]*https?://[^/ ]+' $files 2>/dev/null |
          grep -oE 'https?://[^/ ]+' | sed -E 's#https?://##' | sort -u)
  [ -z "$hosts" ] && return 0
  for h in $hosts; do timeout 5 getent hosts "$h" >/dev/null 2>&1 && return 0; done
  return 1
}
installed=0
if have_cmd apt-get && ! mirror_reachable; then
  echo "setup: no package mirror reachable (no network): nothing installed"
elif have_cmd apt-get && { [ -z "$sudo" ] && [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; }; then
  export DEBIAN_FRONTEND=noninteractive
  # a machine without network fails the update quickly; the time-out bounds a slow mirror
  if timeout 300 $sudo apt-get update -qq >/dev/null 2>&1 &&
     timeout 900 $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; then
    installed=1
  else
    echo "setup: apt-get could not install ${pkgs[*]} (no network or no such packages here)"
  fi
elif ! have_cmd apt-get; then
  echo "setup: no apt-get on this machine: install ${pkgs[*]} (or their equivalents) by hand"
fi

# what is still missing after the attempt
fail=0
if ! have_criterion; then
  echo "setup: Criterion is required to build the tests: apt-get install libcriterion-dev, or bundle it"
  echo "       (../shared/device/bundle-criterion.sh /abs/dir) and pass CRITERION_HOME=/abs/dir"
  fail=1
fi
have_cmd python3 || { echo "setup: python3 is required by scripts/run_tests.sh"; fail=1; }
have_cmd mpicc   || echo "setup: note: no OpenMPI: stages 05-07 will be skipped"
have_cmd gnuplot || echo "setup: note: no gnuplot: benchmarks write CSV tables but no PNG plots"
[ $installed = 1 ] && [ $fail = 0 ] && echo "setup: done"
exit $fail
