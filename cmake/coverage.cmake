# Target `coverage` (the coverage preset; docs/safety.md section 12): clears the
# counters, runs the CTest suites of this build but memcheck, exhaustive, cuda
# and fuzz, then gcovr's line and branch coverage of ref/ and src/ against the
# 90% target of issue 15. The report: coverage.txt (per file, lines),
# coverage_branches.txt (per file, branches), coverage.json (summary), all in
# the build tree. It reports; it does not fail under the target.
find_program(TA_GCOVR gcovr)
if(NOT TA_GCOVR)
  add_custom_target(coverage
    COMMAND ${CMAKE_COMMAND} -E echo "coverage: gcovr not found (pip install gcovr)"
    COMMAND ${CMAKE_COMMAND} -E false)
  return()
endif()
# The counters are searched for in this build tree only (the last argument of
# each gcovr command): by default gcovr searches --root, the source tree, and
# would merge another build's counters (build/<other preset>) into the report.
set(_ta_gcovr_args --root ${PROJECT_SOURCE_DIR} --object-directory ${PROJECT_BINARY_DIR}
    --filter ${PROJECT_SOURCE_DIR}/ref/ --filter ${PROJECT_SOURCE_DIR}/src/
    --exclude-unreachable-branches
    # counts past 2^32 (the stress tests' inner loops) are real, not gcov's
    # bug 68080 that gcovr >= 6 guards against: warn, do not abort
    --gcov-ignore-parse-errors=suspicious_hits.warn)
set(TILEATTN_COVERAGE_JOBS 2 CACHE STRING "ctest -j of the coverage target")
add_custom_target(coverage
  COMMAND find ${PROJECT_BINARY_DIR} -name "*.gcda" -delete
  COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${PROJECT_BINARY_DIR} -j ${TILEATTN_COVERAGE_JOBS}
          -LE "memcheck|exhaustive|cuda|fuzz" --output-on-failure
  COMMAND ${TA_GCOVR} ${_ta_gcovr_args} --txt-metric line --txt ${PROJECT_BINARY_DIR}/coverage.txt
          --txt-summary ${PROJECT_BINARY_DIR}
  COMMAND ${TA_GCOVR} ${_ta_gcovr_args} --txt-metric branch
          --txt ${PROJECT_BINARY_DIR}/coverage_branches.txt
          --json-summary-pretty --json-summary ${PROJECT_BINARY_DIR}/coverage.json
          ${PROJECT_BINARY_DIR}
  COMMAND ${CMAKE_COMMAND} -E cat ${PROJECT_BINARY_DIR}/coverage_branches.txt
  WORKING_DIRECTORY ${PROJECT_BINARY_DIR}
  USES_TERMINAL VERBATIM
  COMMENT "coverage: ctest, then gcovr over ref/ and src/ (target: 90% lines and branches)")
