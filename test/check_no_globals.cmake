# The archive's C objects hold no mutable global state (docs/design.md section 4,
# docs/safety.md): no bytes in a writable data section.
#
#   cmake -DARCHIVE=libtileattn.a -DOBJDUMP=/usr/bin/objdump -P check_no_globals.cmake
#
# Reads `objdump -h` and fails if an object has a non-empty .data, .bss, .tdata,
# .tbss, .data.* or .bss.* section other than .data.rel.ro* (constant tables of
# pointers land there in position-independent code: read-only after relocation).
# Objects compiled by nvcc (*.cu.o) are skipped: their fat-binary registration
# handle is CUDA runtime state, written once when the program starts (issue 16).

cmake_minimum_required(VERSION 3.24)

foreach(var ARCHIVE OBJDUMP)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_no_globals: -D${var}= is required")
  endif()
endforeach()
execute_process(COMMAND "${OBJDUMP}" -h "${ARCHIVE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_no_globals: '${OBJDUMP} -h ${ARCHIVE}' failed (${rc}):\n${err}")
endif()

string(REPLACE "\n" ";" lines "${out}")
set(object "")
set(bad "")
set(n_objects 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ :]+):[ \t]+file format")
    set(object "${CMAKE_MATCH_1}")
    math(EXPR n_objects "${n_objects} + 1")
  elseif(NOT object MATCHES "\\.cu\\.o$" AND
         line MATCHES "^ *[0-9]+ +(\\.(data|bss|tdata|tbss)[^ ]*) +([0-9a-f]+) ")
    set(section "${CMAKE_MATCH_1}")
    set(size "${CMAKE_MATCH_3}")
    if(NOT section MATCHES "^\\.data\\.rel\\.ro" AND NOT size MATCHES "^0+$")
      list(APPEND bad "${object}: ${section} (0x${size} bytes)")
    endif()
  endif()
endforeach()
if(n_objects EQUAL 0)
  message(FATAL_ERROR "check_no_globals: no object found in ${ARCHIVE}")
endif()
if(bad)
  string(REPLACE ";" "\n  " bad_lines "${bad}")
  message(FATAL_ERROR "check_no_globals: writable global data:\n  ${bad_lines}")
endif()
message(STATUS "check_no_globals: ${n_objects} objects, no writable global data")
