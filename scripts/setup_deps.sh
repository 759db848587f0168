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
# ImageDecoder's PNG, JPEG, WebP and JPEG 2000 codecs (optional at build time: kiln builds
# without them)
pkg-config --exists libpng 2>/dev/null || need_apt+=(libpng-dev)
pkg-config --exists libjpeg 2>/dev/null || need_apt+=(libjpeg-dev)
pkg-config --exists libwebp 2>/dev/null || need_apt+=(libwebp-dev)
pkg-config --exists libopenjp2 2>/dev/null || need_apt+=(libopenjp2-7-dev)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# libFuzzer's runtime and the sanitizers' come with clang's compiler-rt
if command -v clang >/dev/null && ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  need_apt+=(libclang-rt-14-dev)
fi
# Python.h for the Python extension (built beside the library; its tests are a part of test.sh)
py_include=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)
[ -n "$py_include" ] && [ -f "$py_include/Python.h" ] || need_apt+=(python3-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# The tests' Python packages, pinned (tests/requirements.txt says why each matters). Into the
# system's python3 where pip may install there; where it refuses (Debian's
# "externally-managed-environment"), into a virtual environment in .venv, which
# scripts/python_env.sh then picks. Any other failure stops here with pip's message.
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/python_env.sh"
if ! kiln_python_pinned "$KILN_PYTHON"; then
  pip_log=$(mktemp)
  if python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore \
       -r "$root/tests/requirements.txt" >"$pip_log" 2>&1; then
    :
  elif grep -q "externally-managed-environment" "$pip_log"; then
    echo "setup_deps: the system's Python refuses pip; installing the test packages into $root/.venv"
    python3 -m venv "$root/.venv" 2>/dev/null || {
      SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv >/dev/null
      python3 -m venv "$root/.venv"
    }
    "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/tests/requirements.txt"
  else
    cat "$pip_log"; rm -f "$pip_log"
    echo "setup_deps: pip could not install tests/requirements.txt" >&2
    exit 1
  fi
  rm -f "$pip_log"
  . "$root/scripts/python_env.sh"
  if ! kiln_python_pinned "$KILN_PYTHON"; then
    echo "setup_deps: $KILN_PYTHON still lacks the pinned versions of tests/requirements.txt" >&2
    exit 1
  fi
fi
