# sourced by the CPU-only calls (callP/K/M/S/B/V/H4) on the device's 16-core host: unpacks HEAD into
# SRC, builds a CPU-only kiln in BUILD (default b; BUILD_TYPE, CMAKE_EXTRA, CPU_TARGETS) and leaves
# the shell in SRC with REPO, R (the results folder), T0 and log() set
set -u
REPO=$PWD; R=$OUT/r; mkdir -p $R; T0=$(date +%s)
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/summary.txt; }
log "head $(cat .devrun/head.rev), $(nproc) cores, $(grep -o -w -E 'avx512f|avx512_vnni|avx512_bf16|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')"
SRC=${SRC:-/tmp/srccpu}; BUILD=${BUILD:-b}
rm -rf $SRC; mkdir -p $SRC; tar -xf .devrun/head.tar -C $SRC; cd $SRC
cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} -DKILN_CUDA=OFF ${CMAKE_EXTRA:-} > $R/build.log 2>&1 \
  && cmake --build $BUILD -j16 --target ${CPU_TARGETS:-kiln_cli kiln} >> $R/build.log 2>&1 \
  || { log "BUILD FAILED"; tail -30 $R/build.log >> $R/summary.txt; exit 1; }
log built
