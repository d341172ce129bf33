# The archive references no allocator (docs/design.md section 4).
#
#   cmake -DARCHIVE=libtileattn.a -DNM=/usr/bin/nm -P check_no_alloc.cmake
#
# Lists the undefined symbols of every object in ARCHIVE (`nm -u -A`) and fails
# if any is an allocator: the C heap (malloc, calloc, realloc, reallocarray,
# free, aligned_alloc, posix_memalign, memalign, valloc, pvalloc, strdup,
# strndup, and glibc's __libc_* and __*_chk forms), C++ operator new/delete in
# every mangled variant (_Znwm, _Znam, _ZdlPv, _ZdaPv, nothrow, sized, aligned;
# 32-bit size_t too), and CUDA allocation (cudaMalloc*, cudaFree*, cudaHostAlloc,
# cudaMallocHost, and the driver API's cuMemAlloc*/cuMemFree*/cuMemHostAlloc).
# Prints each offending symbol with the object that references it.

cmake_minimum_required(VERSION 3.24)

foreach(var ARCHIVE NM)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_no_alloc: -D${var}= is required")
  endif()
endforeach()
if(NOT EXISTS "${ARCHIVE}")
  message(FATAL_ERROR "check_no_alloc: archive not found: ${ARCHIVE}")
endif()

execute_process(COMMAND "${NM}" -u -A "${ARCHIVE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "check_no_alloc: '${NM} -u -A ${ARCHIVE}' failed (${rc}):\n${err}")
endif()

# Exact names, then patterns (anchored; matched against the bare symbol name).
set(alloc_names
  malloc calloc realloc reallocarray free cfree aligned_alloc posix_memalign memalign
  valloc pvalloc strdup strndup wcsdup __strdup __strndup
  __libc_malloc __libc_calloc __libc_realloc __libc_free __libc_memalign __libc_valloc
  __libc_pvalloc __libc_reallocarray
  cudaHostAlloc cudaMallocHost cuMemHostAlloc)
set(alloc_patterns
  "^_Zn[wa][mj]"          # operator new / new[] (size_t = unsigned long / unsigned int), all overloads
  "^_Zd[la]Pv"            # operator delete / delete[], all overloads
  "^cudaMalloc"           # cudaMalloc, cudaMallocAsync, cudaMallocManaged, cudaMallocPitch, ...
  "^cudaFree"             # cudaFree, cudaFreeAsync, cudaFreeHost, cudaFreeArray, ...
  "^cuMemAlloc"           # driver API
  "^cuMemFree"
  "^__(strdup|strndup|realloc|malloc)_chk$")

string(REPLACE ";" "," out_escaped "${out}")
string(REPLACE "\n" ";" lines "${out_escaped}")
set(found "")
set(n_undefined 0)
foreach(line IN LISTS lines)
  # GNU nm:  libtileattn.a:ta_api.c.o:                 U memcpy
  # llvm-nm: libtileattn.a:ta_api.c.o: U memcpy
  if(NOT line MATCHES "[ \t]U[ \t]+([^ \t]+)[ \t]*$")
    continue()
  endif()
  set(sym "${CMAKE_MATCH_1}")
  string(REGEX REPLACE "@.*$" "" sym "${sym}") # symbol versions, if any
  math(EXPR n_undefined "${n_undefined} + 1")
  set(hit FALSE)
  if(sym IN_LIST alloc_names)
    set(hit TRUE)
  else()
    foreach(pat IN LISTS alloc_patterns)
      if(sym MATCHES "${pat}")
        set(hit TRUE)
        break()
      endif()
    endforeach()
  endif()
  if(hit)
    string(REGEX REPLACE "[ \t]+U[ \t]+.*$" "" where "${line}")
    string(APPEND found "  ${sym}    (referenced by ${where})\n")
  endif()
endforeach()

if(NOT found STREQUAL "")
  message(FATAL_ERROR "check_no_alloc: ${ARCHIVE} references allocator symbols:\n${found}")
endif()
if(n_undefined EQUAL 0)
  # every real archive of this library references something (memcpy, fmaf, ...):
  # an empty list means the nm output was not understood
  message(FATAL_ERROR "check_no_alloc: no undefined symbol parsed from '${NM} -u -A' output:\n${out}")
endif()
message(STATUS "check_no_alloc: ${ARCHIVE}: ${n_undefined} undefined references, no allocator")
