#!/usr/bin/env bash
# The project's test command (README, .ci/run): builds and runs every suite.
#   1. release     gcc -O3, CUDA objects compiled (when nvcc exists): every label but stress,
#                  including the exhaustive 2^32 exp/log test, valgrind (memcheck),
#                  the install/consumer check; GPU tests report "skipped" without a GPU.
#   2. clang-debug clang -O0, no CUDA: unit, oracle, bad-input.
#   3. asan        gcc ASan+UBSan, no CUDA: unit, oracle, bad-input (quick modes).
#   4. tsan        gcc ThreadSanitizer, OpenMP off, no CUDA: test_threads (many
#                  pthreads calling REF and CPU at once) and test_tasks (caller-run
#                  CPU tasks from pthreads); about 1 minute on 2 cores.
#   5. fuzz        clang libFuzzer+ASan+UBSan harnesses (test/fuzz), label fuzz: each
#                  runs TILEATTN_FUZZ_SECONDS (20) from the seed corpus.
# CUDA is compiled in configuration 1 only, and the exhaustive and valgrind
# runs happen once, to keep a 2-core CI machine under its time limit.
# Not run here (docs/safety.md sections 11 and 12): the stress label
# (`ctest --preset release -L stress`, about 30 s in Release, 1.3 GB) and the
# coverage report (`cmake --preset coverage && cmake --build --preset coverage
# --target coverage`, needs gcovr).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-$(nproc)}
start=$(date +%s)

step() { printf '\n==== %s (%ss elapsed)\n' "$1" "$(( $(date +%s) - start ))"; }

step "release: configure + build"
cmake --preset release
cmake --build --preset release -j "$jobs"
step "release: ctest (every label but stress)"
ctest --preset release -j "$jobs" -LE stress

step "clang-debug: configure + build"
cmake --preset clang-debug
cmake --build --preset clang-debug -j "$jobs"
step "clang-debug: ctest"
ctest --preset clang-debug -j "$jobs" -LE 'memcheck|exhaustive|cuda|stress'

step "asan: configure + build"
cmake --preset asan
cmake --build --preset asan -j "$jobs"
step "asan: ctest"
ctest --preset asan -j "$jobs" -LE 'memcheck|exhaustive|cuda|stress'

step "tsan: configure + build (test_threads, test_tasks)"
cmake --preset tsan
cmake --build --preset tsan -j "$jobs"
step "tsan: ctest (test_threads, test_tasks)"
ctest --preset tsan

step "fuzz: configure + build"
cmake --preset fuzz
cmake --build --preset fuzz -j "$jobs"
step "fuzz: ctest (label fuzz)"
ctest --preset fuzz -j "$jobs"

step "all test configurations passed"
