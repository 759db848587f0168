# sourced by the callX.sh scripts on the device: unpack HEAD, build build-gpu, make the zoo
set -u
REPO=$PWD
R=$OUT/r; mkdir -p $R
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $R/summary.txt; }
log "head $(cat .devrun/head.rev) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores"
SRC=/tmp/src
# a warm machine keeps /tmp: a second call at the same revision builds incrementally
if [ "$(cat $SRC/.kiln_rev 2>/dev/null)" != "$(cat .devrun/head.rev)" ]; then
  rm -rf $SRC; mkdir -p $SRC; tar -xf .devrun/head.tar -C $SRC; cp .devrun/head.rev $SRC/.kiln_rev
else log "reusing /tmp/src at $(cat $SRC/.kiln_rev)"; fi
cd $SRC
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKILN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 > $R/build.log 2>&1 \
  && cmake --build build-gpu -j16 --target ${BUILD_TARGETS:-kiln_cli kiln} >> $R/build.log 2>&1 \
  || { log "BUILD FAILED"; tail -40 $R/build.log >> $R/summary.txt; exit 1; }
log "built"
if [ "${NOZOO:-0}" != 1 ]; then
  python3 $REPO/.devrun/make_zoo.py /tmp/zoo > $R/zoo.log 2>&1 || { log "make_zoo failed"; tail -20 $R/zoo.log >> $R/summary.txt; }
  log "zoo made: $(ls /tmp/zoo | tr '\n' ' ')"
fi
