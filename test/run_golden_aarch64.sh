#!/usr/bin/env bash
# Golden hashes on another architecture (docs/design.md 7, issue 3 item 4): cross-compiles
# the library and test_golden for aarch64 with the project's own CMake (static
# link, no CUDA, no OpenMP), at -O3 (Release) and -O0 (Debug), and runs each under
# qemu-aarch64 (user-mode emulation) against test/golden/hashes.txt, the file the
# x86-64 builds check. Equal hashes: the same bits on another ISA and libm.
#
# Needs (Debian): apt-get install -y gcc-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross
# Not part of test/run_all.sh: it cross-builds the library twice (about a minute on
# 2 cores); run it by hand or in a nightly job. Exit 77 (skip) if the tools are missing.
#   bash test/run_golden_aarch64.sh            (build dirs: build/aarch64-{release,debug})
set -euo pipefail
cd "$(dirname "$0")/.."
cc=${CC_AARCH64:-aarch64-linux-gnu-gcc}
emu=${QEMU_AARCH64:-qemu-aarch64}
jobs=${JOBS:-$(nproc)}
for tool in "$cc" "$emu"; do
  if ! command -v "$tool" > /dev/null; then
    echo "run_golden_aarch64: $tool not found (apt-get install -y gcc-aarch64-linux-gnu" \
         "qemu-user libc6-dev-arm64-cross)" >&2
    exit 77
  fi
done
start=$(date +%s)
for type in Release Debug; do
  build=build/aarch64-$(echo "$type" | tr '[:upper:]' '[:lower:]')
  echo "==== aarch64 $type ($build)"
  cmake -S . -B "$build" -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
        -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE="$type" -DTILEATTN_CUDA=OFF \
        -DTILEATTN_OPENMP=OFF -DTILEATTN_BENCH=OFF -DTILEATTN_EXHAUSTIVE=OFF \
        -DCMAKE_EXE_LINKER_FLAGS=-static -DCMAKE_CROSSCOMPILING_EMULATOR="$emu" \
        -DTA_LIBM=m > /dev/null  # the target's libm (find_library would find the host's)
  cmake --build "$build" --target test_golden -j "$jobs" > /dev/null
  file "$build/test/test_golden" 2> /dev/null | sed 's/^/  /' || true
  "$emu" "$build/test/test_golden" test/golden/hashes.txt
done
echo "run_golden_aarch64: passed ($(( $(date +%s) - start )) s)"
