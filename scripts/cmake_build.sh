#!/usr/bin/env bash
# Configures and builds kiln in a build folder, showing progress: the configuration's kiln lines
# (CUDA on or off, and why), then the build's percentage (one updating line on a terminal, every
# 10% in a log), the compilers' warnings and errors, and on failure the end of the build log.
#
#   bash scripts/cmake_build.sh DIR [CMAKE ARGS...]     e.g. build -DCMAKE_BUILD_TYPE=Release
#
# The full output stays in DIR/configure.log and DIR/build.log.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:?usage: cmake_build.sh DIR [CMAKE ARGS...]}"; shift
jobs="${KILN_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
mkdir -p "$dir"
echo "== configuring $dir ${*:-}"
if ! cmake -S "$root" -B "$dir" "$@" >"$dir/configure.log" 2>&1; then
  tail -30 "$dir/configure.log"; echo "== configuring $dir failed (whole log: $dir/configure.log)"; exit 1
fi
grep -E '^-- kiln:|CMake Warning' "$dir/configure.log" | sed 's/^-- /   /'
tty=0; [ -t 1 ] && tty=1
start=$(date +%s)
cmake --build "$dir" -j"$jobs" 2>&1 | tee "$dir/build.log" | awk -v tty="$tty" '
  /^\[ *[0-9]+%\]/ {
    match($0, /[0-9]+%/); p = substr($0, RSTART, RLENGTH - 1) + 0
    if (tty) { printf "\r   building: %3d%%", p; open = 1 }
    else if (p >= last + 10) { printf "   building: %d%%\n", p; last = p }
    fflush(); next
  }
  /[Ww]arning|[Ee]rror/ { if (open) { printf "\n"; open = 0 } print; fflush() }
  END { if (open) printf "\n" }'
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "== building $dir failed; the end of $dir/build.log:"; tail -40 "$dir/build.log"; exit "$rc"
fi
echo "== built $dir in $(( $(date +%s) - start )) s"
