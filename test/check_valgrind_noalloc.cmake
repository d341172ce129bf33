# Zero heap allocations inside library calls, witnessed by valgrind.
#
#   cmake -DVALGRIND=/usr/bin/valgrind -DPROG=/path/to/test_noalloc -P check_valgrind_noalloc.cmake
#
# Runs PROG under `valgrind --trace-malloc=yes --log-fd=2`. PROG writes the lines
# TA_NOALLOC_BEGIN / TA_NOALLOC_END to fd 2 with write(2) around its library
# calls; valgrind writes one line per allocator call ("--PID-- malloc(16) = 0x..",
# also calloc, realloc, free, memalign, operator new/delete, ...) to the same fd,
# so the order is exact. Fails if any such line lies between a BEGIN and its END,
# if the markers are missing or unbalanced, if valgrind traced no allocation at all
# (tracing not working), or if PROG or valgrind failed.
# TA_NOALLOC_SELFTEST=1 in the environment makes PROG allocate between the markers:
# this check must then fail (see test/test_noalloc.c).

cmake_minimum_required(VERSION 3.24)

foreach(var VALGRIND PROG)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_valgrind_noalloc: -D${var}= is required")
  endif()
endforeach()
if(NOT EXISTS "${PROG}")
  message(FATAL_ERROR "check_valgrind_noalloc: program not found: ${PROG}")
endif()

execute_process(
  COMMAND "${VALGRIND}" --trace-malloc=yes --log-fd=2 --error-exitcode=99 "${PROG}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)

set(problems "")
if(NOT rc EQUAL 0)
  list(APPEND problems "valgrind/${PROG} exited with '${rc}'")
endif()

# Split stderr into lines. Semicolons and square brackets would upset CMake's
# list splitting, so they are replaced first (neither occurs in the lines we match).
string(REPLACE ";" "," err_escaped "${err}")
string(REPLACE "[" "(" err_escaped "${err_escaped}")
string(REPLACE "]" ")" err_escaped "${err_escaped}")
string(REPLACE "\n" ";" lines "${err_escaped}")

set(inside FALSE)
set(n_begin 0)
set(n_end 0)
set(n_traced 0)
set(n_inside 0)
set(found "")
foreach(line IN LISTS lines)
  if(line STREQUAL "TA_NOALLOC_BEGIN")
    if(inside)
      list(APPEND problems "TA_NOALLOC_BEGIN twice without TA_NOALLOC_END")
    endif()
    set(inside TRUE)
    math(EXPR n_begin "${n_begin} + 1")
  elseif(line STREQUAL "TA_NOALLOC_END")
    if(NOT inside)
      list(APPEND problems "TA_NOALLOC_END without TA_NOALLOC_BEGIN")
    endif()
    set(inside FALSE)
    math(EXPR n_end "${n_end} + 1")
  elseif(line MATCHES "^--[0-9]+-- [A-Za-z_][A-Za-z0-9_:]*\\(")
    # a --trace-malloc line: malloc, calloc, realloc, free, memalign, _Znwm, ...
    math(EXPR n_traced "${n_traced} + 1")
    if(inside)
      math(EXPR n_inside "${n_inside} + 1")
      if(n_inside LESS_EQUAL 20)
        string(APPEND found "    ${line}\n")
      endif()
    endif()
  endif()
endforeach()

if(n_begin EQUAL 0)
  list(APPEND problems "no TA_NOALLOC_BEGIN marker in the output")
endif()
if(inside OR NOT n_begin EQUAL n_end)
  list(APPEND problems "markers unbalanced: ${n_begin} BEGIN, ${n_end} END")
endif()
if(n_traced EQUAL 0)
  list(APPEND problems "valgrind traced no allocator call at all: --trace-malloc is not working")
endif()
if(n_inside GREATER 0)
  list(APPEND problems "${n_inside} allocator call(s) between the markers, i.e. inside library calls:\n${found}")
endif()

if(problems)
  string(REPLACE ";" "\n  - " report "${problems}")
  message("---- program stdout ----\n${out}")
  message(FATAL_ERROR "valgrind_noalloc FAILED:\n  - ${report}")
endif()
message(STATUS "valgrind_noalloc: ${n_begin} marked window(s), 0 allocator calls inside; "
               "${n_traced} traced outside (the test's own set-up)")
