#!/usr/bin/env bash
# Proof of equivalence of the optimisation levels: every ONNX node test and every zoo model runs
# at levels 0, 1, 2 and 3; each level's outputs are compared with level 0's at the test's
# tolerance (and with the reference outputs through kiln test). Ends with
# "N passed, N failed, N skipped".
#
#   bash scripts/equivalence.sh [--provider P] [KILN] [DIR...]
#     P     kiln's --provider for every run (e.g. cuda,cpu; also $KILN_EQ_PROVIDER; default: the CPU)
#     KILN  the kiln binary (default build/kiln)
#     DIR   test folders (default: build/nodetests and ../shared/models, or $KILN_ZOO)
# $KILN_EQ_JOBS folders are checked at once (default 1).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
provider="${KILN_EQ_PROVIDER:-}"
if [ "${1:-}" = "--provider" ]; then provider="${2:-}"; shift 2; fi
provider_args=()
[ -n "$provider" ] && provider_args=(--provider "$provider")
kiln="${1:-$root/build/kiln}"
shift || true
dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  for d in "$root/build/nodetests" "${KILN_ZOO:-$root/../shared/models}"; do
    [ -d "$d" ] && dirs+=("$d")
  done
fi
if [ ! -x "$kiln" ]; then echo "equivalence: $kiln is not built"; echo "0 passed, 1 failed, 0 skipped"; exit 1; fi
if [ ${#dirs[@]} -eq 0 ]; then echo "equivalence: no test folders"; echo "0 passed, 0 failed, 1 skipped"; exit 0; fi
# scratch (outputs and private compiled-model caches) on tmpfs where there is one
tmp_parent=/dev/shm; [ -d "$tmp_parent" ] && [ -w "$tmp_parent" ] || tmp_parent="${TMPDIR:-/tmp}"
KILN_EQ_TMP="$(mktemp -d "$tmp_parent/kiln_eq.XXXXXX")"
KILN_CACHE_DIR="$KILN_EQ_TMP/cache"
export KILN_EQ_TMP KILN_CACHE_DIR
trap 'rm -rf "$KILN_EQ_TMP"' EXIT
python3 "$root/scripts/equivalence.py" --kiln "$kiln" --jobs "${KILN_EQ_JOBS:-1}" "${provider_args[@]}" \
  --expected-failures "$root/tests/conformance/expected_failures.txt" "${dirs[@]}"
