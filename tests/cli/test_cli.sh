#!/usr/bin/env bash
# The kiln command's parsing, help and messages: every case runs the built kiln and checks its exit
# status and the message it prints. Ends with N passed, N failed, N skipped.
#
#   bash tests/cli/test_cli.sh BUILD/kiln
set -uo pipefail
kiln="${1:?usage: test_cli.sh PATH/TO/kiln}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pass=0 fail=0 skip=0
export KILN_CACHE_DIR="$work/cache"

# expect NAME STATUS PATTERN -- ARGS...: kiln ARGS exits with STATUS and its stderr+stdout match the
# extended regular expression PATTERN
expect() {
  local name="$1" want="$2" pattern="$3"; shift 4
  local out rc
  out=$("$kiln" "$@" 2>&1); rc=$?
  if [ "$rc" -eq "$want" ] && grep -Eq -- "$pattern" <<<"$out"; then
    pass=$((pass + 1))
  else
    echo "FAIL $name: kiln $* -> status $rc (want $want), output:"; sed 's/^/    /' <<<"$out" | head -8
    echo "    (wanted /$pattern/)"
    fail=$((fail + 1))
  fi
}

# a tiny model with a symbolic batch dimension, written byte by byte (no Python needed): the
# graph y = Relu(x), x float[batch,4]
python_model() {
  "${KILN_PYTHON:-python3}" - "$1" <<'PY' 2>/dev/null
import sys, onnx
from onnx import helper, TensorProto
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
PY
}
model="$work/relu.onnx"
have_model=1
python_model "$model" || have_model=0

m="$model"
# --- numbers: integer, range, no trailing text; the message names the option and the text
expect "dim not a number"      2 "--dim batch: 'abc' is not an integer" -- run "$m" --dim batch=abc
expect "dim negative"          2 "--dim batch: '-3' is out of range"    -- run "$m" --dim batch=-3
expect "dim trailing text"     2 "--dim batch: '2x' is not an integer"  -- run "$m" --dim batch=2x
expect "dim empty value"       2 "--dim batch needs a value"            -- run "$m" --dim batch=
expect "dim no name"           2 "--dim takes NAME=VALUE"               -- run "$m" --dim 4
expect "dim twice"             2 "--dim batch given twice"              -- run "$m" --dim batch=1 --dim batch=2
expect "repeat not a number"   2 "--repeat: 'abc' is not an integer"    -- run "$m" --repeat abc
expect "repeat zero"           2 "--repeat: '0' is out of range"        -- run "$m" --repeat 0
expect "repeat twice"          2 "--repeat given twice"                 -- run "$m" --repeat 2 --repeat 3
expect "threads word"          2 "--threads: 'two' is not an integer"   -- run "$m" --threads two
expect "threads negative"      2 "--threads: '-1' is out of range"      -- run "$m" --threads -1
expect "threads huge"          2 "--threads: '99999999999999999999' is out of range" -- run "$m" --threads 99999999999999999999
expect "threads blank"         2 "--threads: ' 2' is not an integer"    -- run "$m" --threads " 2"
expect "threads twice"         2 "--threads given twice"                -- run "$m" --threads 1 --threads 2
expect "opt-level 4"           2 "--opt-level: '4' is out of range \(0..3\)" -- run "$m" --opt-level 4
expect "opt-level 1.5"         2 "--opt-level: '1.5' is not an integer" -- compile "$m" -o "$work/x.kiln" --opt-level 1.5
expect "inspect opt-level"     2 "kiln inspect: --opt-level: 'x' is not an integer" -- inspect "$m" --opt-level x
expect "inspect dim"           2 "kiln inspect: --dim batch: 'abc'"     -- inspect "$m" --dim batch=abc
expect "compile dim"           2 "kiln compile: --dim batch: '1e3' is not an integer" -- compile "$m" -o "$work/x.kiln" --dim batch=1e3
expect "compile -o twice"      2 "-o given twice"                       -- compile "$m" -o a.kiln -o b.kiln
expect "cache key dim"         2 "kiln cache key: --dim n: 'q'"          -- cache --cache-dir "$work/c" key "$m" --dim n=q
expect "cache list extra"      2 "kiln cache list: takes no arguments \('x'\)" -- cache --cache-dir "$work/c" list x
expect "cache verify extra"    2 "kiln cache verify: takes only --delete, not '--all'" -- cache --cache-dir "$work/c" verify --delete --all
mkdir -p -m 700 "$work/c2"
expect "cache verify"          0 "0 ok" -- cache --cache-dir "$work/c2" verify
expect "test threads"          2 "kiln test: --threads: 'x'"            -- test --threads x "$work"
expect "test repeat 0"         2 "kiln test: --repeat: '0' is out of range \(1..1000\)" -- test --repeat 0 "$work"
expect "help test repeat"      0 "--repeat N .*run each data set N times" -- test --help
expect "input twice"           2 "--input x given twice"                -- run "$m" --input x=a.npy --input x=b.npy
expect "input not NAME=FILE"   2 "--input takes NAME=FILE"              -- run "$m" --input a.npy
expect "value missing"         2 "--threads needs a value"              -- run "$m" --threads
expect "log level"             2 "--log takes error\|warning\|info\|debug, not 'loud'" -- run "$m" --log loud
expect "unknown option"        2 "kiln run: unknown option '--frobnicate'" -- run "$m" --frobnicate
expect "unknown command"       2 "kiln: unknown command 'rnu'"          -- rnu
expect "info takes nothing"    2 "kiln info: takes no arguments"         -- info extra

# --- kiln info: why a provider cannot run here, in the user's terms
info=$("$kiln" info 2>&1)
if ! grep -q "^providers compiled in:.* cuda" <<<"$info"; then
  expect "info: no CUDA backend" 0 "cmake -DKILN_CUDA=ON" -- info
elif ldc=$(command -v ldconfig || echo /sbin/ldconfig) && [ -x "$ldc" ] && [ ! -e /dev/nvidia0 ] &&
     ! "$ldc" -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  expect "info: no NVIDIA driver" 0 "^provider cuda: no CUDA device: no NVIDIA driver \(libcuda.so.1 cannot be loaded" -- info
else
  echo "SKIP kiln info's no-driver message: this machine has an NVIDIA driver"; skip=$((skip + 1))
fi

# --- the CPU kernels' level (src/backend/cpu/isa.h): kiln info names it and how it was chosen; a
# level the CPU lacks (KILN_CPU_MASK hides features: it stands for such a CPU) or the build lacks
# fails the session with the reason (status 1), never with an illegal instruction
expect "info: CPU kernels' level" 0 "kernels: (baseline|avx2|avx512) \(" -- info
KILN_CPU_ISA=avx9 expect "CPU level unknown" 1 "provider 'cpu': KILN_CPU_ISA='avx9' is not a CPU level" -- run "$m" --dim batch=2
KILN_CPU_MASK=sse9 expect "CPU mask unknown" 1 "KILN_CPU_MASK: unknown CPU feature 'sse9'" -- run "$m" --dim batch=2
if grep -q "run-time dispatch among" <<<"$info"; then
  KILN_CPU_ISA=avx512 KILN_CPU_MASK=avx512f,avx512bw expect "CPU level the CPU lacks" 1 \
    "provider 'cpu': KILN_CPU_ISA=avx512: this CPU lacks avx512f,avx512bw \(hidden by KILN_CPU_MASK\)" -- run "$m" --dim batch=2
  KILN_CPU_ISA=avx2 KILN_CPU_MASK=fma expect "CPU level the CPU lacks (avx2)" 1 \
    "KILN_CPU_ISA=avx2: this CPU lacks fma \(hidden by KILN_CPU_MASK\)" -- run "$m" --dim batch=2
  KILN_CPU_ISA=baseline expect "CPU level forced" 0 "kernels: baseline \(run-time dispatch .*KILN_CPU_ISA chose it" -- info
  KILN_CPU_ISA=baseline expect "CPU level forced: runs" 0 "y: float\\[2,4\\]" -- run "$m" --dim batch=2
  KILN_CPU_MASK=avx512f expect "CPU mask: the next level down" 0 "kernels: (baseline|avx2) \(" -- info
else
  other=baseline; grep -q "kernels: baseline" <<<"$info" && other=avx2
  KILN_CPU_ISA=$other expect "CPU level not built (native build)" 1 "KILN_CPU_ISA=$other: this build of kiln has the CPU kernels of .* only" -- run "$m" --dim batch=2
fi

# --- kiln info with stand-ins for the driver and the libraries, first in LD_LIBRARY_PATH, so that
# every case is checked on any machine (a GPU host's real driver included): the CUDA runtime linked
# into kiln dlopens "libcuda.so.1" and takes the stand-in (tests/cli/stub_libcuda.c: a version and no
# GPU); a libcuda.so.1 that cannot be loaded (it needs a library that does not exist) is a machine
# without a driver. A stand-in driver with a GPU is not possible (the runtime then asks the driver
# for its private export tables), so the libraries are checked by kiln info's own "libraries:" line,
# which it prints with or without a GPU, against stand-ins without the functions kiln resolves.
cc=$(command -v cc || command -v gcc || true)
if grep -q "^providers compiled in:.* cuda" <<<"$info" && [ -n "$cc" ]; then
  st="$work/stubs"
  mkdir -p "$st/nodrv" "$st/drv" "$st/lt" "$st/dnn"
  echo 'int kiln_absent_dependency(void) { return 0; }' >"$st/dep.c"
  echo 'int kiln_absent_dependency(void); int cuInit(unsigned f) { (void)f; return kiln_absent_dependency(); }' >"$st/nodrv.c"
  echo 'int kiln_stub_library_without_functions;' >"$st/empty.c"
  if "$cc" -shared -fPIC -o "$st/libkiln_absent_dependency.so" "$st/dep.c" &&
     "$cc" -shared -fPIC -o "$st/nodrv/libcuda.so.1" "$st/nodrv.c" -L"$st" -Wl,--no-as-needed -lkiln_absent_dependency &&
     rm "$st/libkiln_absent_dependency.so" &&
     "$cc" -shared -fPIC -o "$st/drv/libcuda.so.1" "$root/tests/cli/stub_libcuda.c" &&
     "$cc" -shared -fPIC -o "$st/empty.so" "$st/empty.c"; then
    for v in 11 12 13 14; do cp "$st/empty.so" "$st/lt/libcublasLt.so.$v"; done
    cp "$st/empty.so" "$st/lt/libcublasLt.so"
    for v in 8 9 10; do cp "$st/empty.so" "$st/dnn/libcudnn.so.$v"; done
    cp "$st/empty.so" "$st/dnn/libcudnn.so"
    lp="${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    LD_LIBRARY_PATH="$st/nodrv$lp" expect "info: no driver (stand-in)" 0 \
      "^provider cuda: no CUDA device: no NVIDIA driver \(libcuda.so.1 cannot be loaded: libkiln_absent_dependency.so" -- info
    LD_LIBRARY_PATH="$st/drv$lp" KILN_STUB_CUDA_VERSION=99000 expect "info: driver without a GPU (stand-in)" 0 \
      "^provider cuda: no CUDA device: the NVIDIA driver \(CUDA 99\.0\) is installed but sees no GPU" -- info
    LD_LIBRARY_PATH="$st/drv$lp" KILN_STUB_CUDA_VERSION=11080 expect "info: driver too old (stand-in)" 0 \
      "^provider cuda: no CUDA device: the NVIDIA driver is too old \(it supports CUDA 11\.8; this kiln was built with CUDA [0-9]+\.[0-9]+\): update the driver" -- info
    LD_LIBRARY_PATH="$st/drv:$st/lt$lp" expect "info: cuBLASLt unusable (stand-in)" 0 \
      "^  libraries: cuBLASLt not usable: libcublasLt\.so\.[0-9]+ has no symbol cublasLt[A-Za-z]+ \(the CUDA provider needs it\)" -- info
    # the real libraries: the genuine "missing" message where they are not installed
    real=$(LD_LIBRARY_PATH="$st/drv$lp" "$kiln" info 2>&1)
    if grep -q "^  libraries: cuBLASLt not usable: cannot load" <<<"$real"; then
      pass=$((pass + 1)); echo "SKIP kiln info's cuDNN check: cuBLASLt is not installed here (reported missing, as it should)"; skip=$((skip + 1))
    elif grep -q "^  libraries: cuBLASLt and cuDNN loaded" <<<"$real"; then
      pass=$((pass + 1))
      LD_LIBRARY_PATH="$st/drv:$st/dnn$lp" expect "info: cuDNN unusable (stand-in)" 0 \
        "^  libraries: cuBLASLt loaded; cuDNN not loaded \(the warning says why\): Conv and ConvTranspose run on another provider" -- info
      LD_LIBRARY_PATH="$st/drv:$st/dnn$lp" expect "info: cuDNN's reason (stand-in)" 0 \
        "cuDNN unusable \(libcudnn\.so\.[0-9]+ has no symbol cudnn[A-Za-z]+\)" -- info
    else
      echo "FAIL kiln info's libraries line, real libraries:"; sed 's/^/    /' <<<"$real"; fail=$((fail + 1))
    fi
  else
    echo "FAIL kiln info stand-ins: $cc could not build them"; fail=$((fail + 1))
  fi
else
  echo "SKIP kiln info with stand-in drivers and libraries: no CUDA backend in this build or no C compiler"; skip=$((skip + 1))
fi

# --- help: every command, both ways, the same text; every option the code parses is listed
cmds=$("$kiln" help | awk '/^commands:/{on=1; next} on && /^  [a-z]/{print $1} on && /^$/{exit}' | tr '\n' ' ')
n_cmds=$(wc -w <<<"$cmds")
if [ "$n_cmds" -ge 9 ]; then pass=$((pass + 1)); else echo "FAIL kiln help lists $n_cmds commands: $cmds"; fail=$((fail + 1)); fi
for c in $cmds; do
  expect "help $c" 0 "^usage: kiln $c" -- help "$c"
  a=$("$kiln" help "$c" 2>&1); b=$("$kiln" "$c" --help 2>&1)
  if [ "$a" = "$b" ]; then pass=$((pass + 1)); else echo "FAIL kiln $c --help differs from kiln help $c"; fail=$((fail + 1)); fi
done
expect "help run defaults"   0 "--opt-level N +optimisation level 0..3 \(default: 3\)" -- help run
expect "help inspect dump"   0 "--dump FILE.onnx"  -- help inspect
expect "help compile tuning" 0 "--tuning T .*exhaustive" -- help compile
expect "help test threads"   0 "--threads N .*\(default: 1\)" -- test --help
expect "-h after a model"    0 "^usage: kiln run" -- run "$m" -h
expect "help unknown"        2 "kiln help: no command 'nope'" -- help nope
expect "top-level help"      0 "bench +latency" -- --help
all_help=$(for c in $cmds; do "$kiln" help "$c"; done)
missing=""
for f in "$root"/tools/run.c "$root"/tools/inspect.c "$root"/tools/compile.c "$root"/tools/test_runner.c \
         "$root"/tools/cli_parse.c "$root"/tools/bench.c; do
  [ -f "$f" ] || continue
  for opt in $(grep -oE '"--[a-z][a-z-]*"' "$f" | tr -d '"' | sort -u); do
    grep -qe "$opt\b" <<<"$all_help" || missing="$missing $opt($(basename "$f"))"
  done
done
if [ -z "$missing" ]; then pass=$((pass + 1)); else echo "FAIL options the code parses but no help lists:$missing"; fail=$((fail + 1)); fi
# the man page and the completion script come from the same table
man_page=$("$kiln" help --man)
if grep -q '^\.TH KILN 1' <<<"$man_page" && [ "$(grep -c '^\.SS "kiln ' <<<"$man_page")" -eq "$n_cmds" ] &&
   grep -q 'opt\\-level' <<<"$man_page"; then pass=$((pass + 1)); else echo "FAIL kiln help --man: not a man page of $n_cmds commands"; fail=$((fail + 1)); fi
if command -v man >/dev/null && [ -n "$(man -l <(echo "$man_page") 2>&1 >/dev/null | grep -v 'cannot adjust\|^$')" ]; then
  echo "FAIL man reports problems in the man page"; fail=$((fail + 1))
else pass=$((pass + 1)); fi
"$kiln" help --bash-completion "$work/kiln.bash"
if bash -n "$work/kiln.bash" && out=$(bash -c '. "$1"; COMP_WORDS=(kiln run --opt-level ""); COMP_CWORD=3; _kiln; echo "${COMPREPLY[*]}"' _ "$work/kiln.bash") &&
   [ "$out" = "0 1 2 3" ]; then pass=$((pass + 1)); else echo "FAIL the bash completion script (got '${out:-}')"; fail=$((fail + 1)); fi

# --- files that are not what they should be: said first, the path once
printf 'hello notes\nline two\n' > "$work/notes.txt"
expect "text file as model"        1 "^kiln run: $work/notes.txt is not an ONNX model \(it looks like text\): ModelProto" -- run "$work/notes.txt"
expect "text file as model (once)" 1 "^[^/]*$work/notes.txt[^/]*$" -- run "$work/notes.txt"
expect "inspect a text file"       1 "^kiln inspect: $work/notes.txt is not an ONNX model \(it looks like text\): " -- inspect "$work/notes.txt"
: > "$work/empty.onnx"
expect "empty model"               1 "$work/empty.onnx is not an ONNX model: the file is empty" -- run "$work/empty.onnx"
expect "missing model"             1 "$work/none.onnx" -- run "$work/none.onnx"
printf '\x08\x08\x3a\xff\xff\x01abc' > "$work/cut.onnx"   # ir_version 8, then a graph cut short
expect "truncated model"           1 "$work/cut.onnx is not an ONNX model \(it looks like an ONNX model cut short" -- inspect "$work/cut.onnx"
if [ "$have_model" = 1 ]; then
  cp "$work/notes.txt" "$work/notes.npy"; cp "$work/notes.txt" "$work/notes.pb"
  expect "text file as .npy"   1 "input 'x': $work/notes.npy is not a .npy file: " -- run "$m" --dim batch=2 --input x="$work/notes.npy"
  expect "text file as .pb"    1 "input 'x': $work/notes.pb is not an ONNX tensor file \(it looks like text\): " -- run "$m" --dim batch=2 --input x="$work/notes.pb"
  expect "model as tensor"     1 "input 'x': $m is not an ONNX tensor file \(it looks like an ONNX model\)" -- run "$m" --dim batch=2 --input x="$m"
  expect "dim works"           0 "y: float\[3,4\]" -- run "$m" --dim batch=3
  expect "dim zero"            0 "y: float\[0,4\]" -- run "$m" --dim batch=0
  expect "symbolic needs dim"  1 "give its size with --dim batch=VALUE" -- run "$m"
  # progress of long work: none when stderr is not a terminal, unless asked (the interval made 0)
  expect "progress quiet in a log" 0 "^session created" -- run "$m" --dim batch=2
  out=$(KILN_PROGRESS_INTERVAL_MS=0 "$kiln" run "$m" --dim batch=2 2>&1 >/dev/null)
  if [ -z "$out" ]; then pass=$((pass + 1)); else echo "FAIL progress printed without a terminal: $out"; fail=$((fail + 1)); fi
  KILN_PROGRESS=1 KILN_PROGRESS_INTERVAL_MS=0 expect "progress when asked" 0 "^kiln: run: node 0/1 \(Relu on cpu\), [0-9.]+ s$" -- run "$m" --dim batch=2
  KILN_PROGRESS=1 KILN_PROGRESS_INTERVAL_MS=0 expect "progress ends" 0 "^kiln: run: node 1/1, done in [0-9.]+ s$" -- run "$m" --dim batch=2
  KILN_CACHE=0 KILN_PROGRESS=1 KILN_PROGRESS_INTERVAL_MS=0 expect "session creation progress (a compile: no cache)" 0 "^kiln: session: optimisation pass [0-9]+/[0-9]+ \(level [123]: [a-z_]+, [0-9]+ nodes\), [0-9.]+ s$" -- run "$m" --dim batch=2
  # KILN_PROFILE=FILE.json: a Chrome/Perfetto trace, a slice per run and per node
  KILN_PROFILE="$work/trace.json" expect "profile trace" 0 "kiln profile: wrote [0-9]+ events \(2 runs\) to $work/trace.json" -- run "$m" --dim batch=2 --repeat 2
  if KILN_PROFILE="$work/trace.json" "$kiln" run "$m" --dim batch=2 --repeat 2 >/dev/null 2>&1 &&
     "${KILN_PYTHON:-python3}" - "$work/trace.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
runs = [e for e in t if e.get("cat") == "run"]
nodes = [e for e in t if e.get("ph") == "X" and e.get("cat") != "run"]
assert len(runs) == 2 and len(nodes) == 2, (runs, nodes)
n = nodes[0]
assert n["args"]["op"] == "Relu" and n["args"]["provider"] == "cpu", n
assert n["args"]["inputs"] == ["float[2,4]"] and n["args"]["outputs"] == ["float[2,4]"], n
assert n["args"]["first"] is True and nodes[1]["args"]["first"] is False
assert runs[0]["ts"] <= n["ts"] and n["ts"] + n["dur"] <= runs[0]["ts"] + runs[0]["dur"] + 1
PY
  then pass=$((pass + 1)); else echo "FAIL the KILN_PROFILE trace is not as expected"; fail=$((fail + 1)); fi
  # kiln inspect FILE.kiln: key, sections and checksums, memory plan, tuning, graph
  "$kiln" compile "$m" --dim batch=2 -o "$work/relu.kiln" >/dev/null 2>&1
  expect "inspect .kiln"          0 "^compiled file: $work/relu.kiln \(.*, format [0-9]+\)" -- inspect "$work/relu.kiln"
  expect "inspect .kiln key"      0 "^  shapes=batch=2" -- inspect "$work/relu.kiln"
  expect "inspect .kiln sections" 0 "^  graph +graph .* checksum [0-9a-f]{16} ok" -- inspect "$work/relu.kiln"
  expect "inspect .kiln runs"     0 "^runs here: yes" -- inspect "$work/relu.kiln"
  expect "inspect .kiln plan"     0 "^memory plan: " -- inspect "$work/relu.kiln"
  expect "inspect .kiln tuning"   0 "^tuning records: " -- inspect "$work/relu.kiln"
  expect "inspect .kiln graph"    0 "^  x: float\[2,4\]" -- inspect "$work/relu.kiln"
  # --precision without cuda is the cpu's (bf16 needs AVX512_BF16: KILN_CPU_NO_BF16=1 acts as a CPU without)
  expect "compile --precision bf16 (cpu)" 0 "providers=cpu\{precision=bf16\}" -- cache key "$m" --dim batch=2 --precision bf16
  expect "compile --tuning without cuda" 1 "--tuning is an option of the cuda provider" -- compile "$m" --dim batch=2 --tuning heuristic -o "$work/x.kiln"
  out=$(KILN_CPU_NO_BF16=1 "$kiln" run "$m" --dim batch=2 --provider cpu:precision=bf16 2>&1); rc=$?
  if [ "$rc" -ne 0 ] && grep -q "AVX512_BF16" <<<"$out"; then pass=$((pass + 1)); else echo "FAIL cpu:precision=bf16 without AVX512_BF16: status $rc: $out"; fail=$((fail + 1)); fi
  size=$(stat -c %s "$work/relu.kiln")
  cp "$work/relu.kiln" "$work/bad.kiln"; printf 'XXXX' | dd of="$work/bad.kiln" bs=1 seek=$((size - 8)) conv=notrunc 2>/dev/null
  expect "inspect corrupt .kiln"  1 "bad.kiln: .*the file is corrupt" -- inspect "$work/bad.kiln"
  head -c 100 "$work/relu.kiln" > "$work/short.kiln"
  expect "inspect short .kiln"    1 "short.kiln: header: .*truncated" -- inspect "$work/short.kiln"
else
  echo "SKIP the cases that need a model: the onnx Python package is missing"; skip=$((skip + 21))
fi

# fold_attention_views forms where it should (a pass that stops forming fails no output check): the
# project model with BERT's and torch MultiheadAttention's blocks at a static shape, both blocks'
# operands in place and BERT's three projections merged; at a symbolic shape too (tiny_transformer's
# batch and sequence are symbolic: its views read them at run time)
mha="$root/build/models/mha_static/model.onnx"
if [ -f "$mha" ] && [ -f "$root/build/models/tiny_transformer/model.onnx" ]; then
  expect "attention views and merged projections" 0 "fold_attention_views .*Q read in place x2, K read in place x2, V read in place x2, output written in place x2, Q, K and V projections as one product x1" -- inspect "$mha" --opt-level 2
  expect "test --repeat runs every data set again" 0 "1 passed, 0 failed" -- test --repeat 3 "$root/build/models/mha_static"
  expect "attention views at a symbolic shape" 0 "fold_attention_views .*Q read in place x1, K read in place x1, V read in place x1, output written in place x1" -- inspect "$root/build/models/tiny_transformer/model.onnx" --opt-level 2
else
  echo "SKIP the attention-view checks: build/models is not there (scripts/test.sh makes it)"; skip=$((skip + 3))
fi

# CUDA's opt-in paths, judged from its kernel tables (no GPU needed; the CUDA build CI makes): operand
# views and control flow on the device only when asked for, until verified on a GPU
ifm="$work/if.onnx"
if "$kiln" info 2>/dev/null | grep -q "^providers compiled in:.* cuda" && [ -f "$mha" ] &&
   "${KILN_PYTHON:-python3}" - "$ifm" <<'PY' 2>/dev/null
import sys, onnx
from onnx import helper, TensorProto
c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
branch = lambda v: helper.make_graph([helper.make_node("Constant", [], ["o"], value=helper.make_tensor("t", TensorProto.FLOAT, [2], [v, v]))],
                                     "b", [], [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2])])
g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch(1.0), else_branch=branch(2.0))], "g", [c], [y])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
PY
then
  if KILN_CUDA_ATTN_VIEWS=0 "$kiln" inspect "$mha" --opt-level 2 --provider cuda 2>&1 | grep -q fold_attention_views; then
    echo "FAIL attention views formed for CUDA with KILN_CUDA_ATTN_VIEWS=0"; fail=$((fail + 1))
  else pass=$((pass + 1)); fi
  expect "attention views for CUDA by default" 0 "fold_attention_views .*Q read in place x2" -- inspect "$mha" --opt-level 2 --provider cuda
  KILN_CUDA_CONTROL_FLOW=0 expect "If on the CPU when CUDA's control flow is off" 0 "placement summary: nodes=3 cuda=0 .*fallback=1" -- inspect "$ifm" --provider cuda,cpu
  expect "If on CUDA by default" 0 "placement summary: nodes=3 cuda=3 " -- inspect "$ifm" --provider cuda,cpu
else
  echo "SKIP CUDA's attention views and control-flow placement: no CUDA backend in this build (or no onnx module or build/models)"; skip=$((skip + 4))
fi

echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
