#!/usr/bin/env bash
# Installs what building and testing kiln needs on a fresh Debian 12 machine (run as root, or
# with sudo available). Safe to run again: it skips what is already there.
set -euo pipefail

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v gcc >/dev/null || need_apt+=(gcc)
command -v make >/dev/null || need_apt+=(make)
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
command -v clang >/dev/null || need_apt+=(clang)
[ -d /usr/share/libonnx-testdata/data ] || need_apt+=(libonnx-testdata)
# ImageDecoder's PNG and JPEG codecs (optional at build time: kiln builds without them)
pkg-config --exists libpng 2>/dev/null || need_apt+=(libpng-dev)
pkg-config --exists libjpeg 2>/dev/null || need_apt+=(libjpeg-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# libFuzzer's runtime and the sanitizers' come with clang's compiler-rt
if command -v clang >/dev/null && ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  need_apt+=(libclang-rt-14-dev)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The ONNX node tests come from this pinned onnx release; onnxruntime makes reference outputs
# for the project's own models. Pinned so the expected-failures list means the same everywhere.
py_ok=$(python3 - <<'PY' 2>/dev/null || true
import onnx, onnxruntime, numpy
print("ok" if onnx.__version__ == "1.23.2" else "")
PY
)
if [ "$py_ok" != "ok" ]; then
  python3 -m pip install -q --disable-pip-version-check "onnx==1.23.2" "onnxruntime==1.32.0" "numpy>=1.26" 2>&1 \
    | grep -v -i "running pip as the 'root' user" || true
fi
