#!/usr/bin/env bash
# The corpus on the GPU machine (issue 18): runs every model folder under CORPUS_DIR with kiln test
# for providers "cuda,cpu" (nodes without a CUDA kernel fall back to the CPU) and "cuda" alone, at
# optimisation levels 0 and 3, against the references beside the models (ONNX Runtime's, or the
# float64 one of an fp16 variant; tolerances from CORPUS_DIR/zoo.json), and writes
#   OUT/info.txt                 kiln info (driver, runtime, device, libraries)
#   OUT/<provider>_L<level>.log  each kiln test run, verbose (an "ok"/"FAIL" line per model)
#   OUT/summary.md               a table model x run (ok / FAIL), each run's counts and time, and
#                                every failure's message
# Exit status: 0 when every run passed, 1 when some model failed or a run did not finish, 2 usage.
# Needs bash, kiln and the corpus folder only (build it with tests/corpus/fetch_corpus.py where a
# package registry is reachable, then carry it, e.g. tests/corpus/pack.py --max-mb 40 OUT).
#
#   bash tests/corpus/gpu_run.sh KILN_BIN CORPUS_DIR OUT
#   GPU_RUN_TIMEOUT=SECONDS   limit per run (default 3600); GPU_RUN_THREADS=N (default 1)
set -uo pipefail
if [ $# -ne 3 ]; then
  echo "usage: bash tests/corpus/gpu_run.sh KILN_BIN CORPUS_DIR OUT" >&2
  exit 2
fi
kiln=$1 corpus=$2 out=$3
if [ ! -x "$kiln" ]; then echo "gpu_run.sh: $kiln is not an executable" >&2; exit 2; fi
if [ ! -d "$corpus" ]; then echo "gpu_run.sh: $corpus is not a folder" >&2; exit 2; fi
mkdir -p "$out" || exit 2
limit=${GPU_RUN_TIMEOUT:-3600}
threads=${GPU_RUN_THREADS:-1}

mapfile -t models < <(find "$corpus" -mindepth 2 -maxdepth 2 -name model.onnx -printf '%h\n' | xargs -r -n1 basename | sort)
if [ ${#models[@]} -eq 0 ]; then echo "gpu_run.sh: no model folders under $corpus" >&2; exit 2; fi

"$kiln" info >"$out/info.txt" 2>&1
echo "kiln info (exit status $?):"
cat "$out/info.txt"

runs=()
status=0
declare -A result   # result[run,model] = ok | FAIL | SKIP
declare -A counts   # counts[run] = "N passed, N failed, N skipped" (or why not)
declare -A secs
for provider in cuda,cpu cuda; do
  for level in 0 3; do
    run="${provider}_L${level}"
    runs+=("$run")
    log="$out/$run.log"
    echo "--- kiln test --provider $provider --opt-level $level ($corpus, ${#models[@]} models)"
    start=$(date +%s)
    timeout "$limit" "$kiln" test -v --provider "$provider" --opt-level "$level" --threads "$threads" "$corpus" >"$log" 2>&1
    rc=$?
    secs[$run]=$(( $(date +%s) - start ))
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -1)
    if [ "$rc" -eq 124 ]; then
      counts[$run]="did not finish in ${limit} s"
      status=1
    elif [ -z "$line" ]; then
      counts[$run]="no counts (exit status $rc)"
      status=1
    else
      counts[$run]=$line
      [ "$rc" -eq 0 ] || status=1
    fi
    echo "${counts[$run]} (${secs[$run]} s)"
    for m in "${models[@]}"; do
      if grep -qE "^ok +$m\$" "$log"; then result[$run,$m]=ok
      elif grep -qE "^FAIL $m[:/ ]" "$log"; then result[$run,$m]=FAIL
      elif grep -qE "^SKIP $m[:/ ]" "$log"; then result[$run,$m]=SKIP
      else result[$run,$m]="-"
      fi
    done
  done
done

{
  echo "# kiln corpus on the GPU"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'); kiln: $kiln; corpus: $corpus (${#models[@]} models); threads $threads"
  echo
  echo '```'
  cat "$out/info.txt"
  echo '```'
  echo
  echo "| run | result | time |"
  echo "|---|---|---|"
  for run in "${runs[@]}"; do echo "| $run | ${counts[$run]} | ${secs[$run]} s |"; done
  echo
  header="| model |" sep="|---|"
  for run in "${runs[@]}"; do header+=" $run |"; sep+="---|"; done
  echo "$header"
  echo "$sep"
  for m in "${models[@]}"; do
    row="| $m |"
    for run in "${runs[@]}"; do row+=" ${result[$run,$m]} |"; done
    echo "$row"
  done
  echo
  echo "\"-\": no line for the model in that run's log (the run stopped early). Failures:"
  echo
  for run in "${runs[@]}"; do
    grep -E '^(FAIL|SKIP) ' "$out/$run.log" | sed "s/^/- $run: /"
  done
} >"$out/summary.md"
echo "summary: $out/summary.md"
exit $status
