# Install the build tree and build tiny consumers against the installed package,
# through find_package(tileattn) and through pkg-config, for each component.
#
#   cmake -DBUILD_DIR=<build tree> -DSRC_DIR=<test/consumer> -DWORK_DIR=<scratch>
#         [-DCONFIG=Release] [-DCMAKE_C_COMPILER=cc] [-DTA_CUDA=ON|OFF] [-DNM=nm]
#         -P check_install_consumer.cmake
#
#   1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix; the expected files exist
#      (with TA_CUDA: libtileattn_cuda.a, tileattn-cuda.pc, tileattnCudaTargets.cmake;
#      without: none of them)
#   2. configure + build SRC_DIR (find_package(tileattn CONFIG REQUIRED), linking
#      tileattn::tileattn only), run it; its symbols must show no CUDA at all
#      (no cuda* / __cuda* symbol: cudart not linked, even from a CUDA build)
#   3. with TA_CUDA: the same with -DCONSUMER_CUDA=ON (COMPONENTS cuda,
#      tileattn::cuda), run it (no GPU needed: it runs REF and the CUDA size
#      query); its symbols must hold the CUDA component's table
#      (ta_cuda_backend_linked)
#   4. compile SRC_DIR/main.c with `pkg-config --cflags --libs tileattn` (no
#      --static; PKG_CONFIG_PATH = the installed pkgconfig dir), run it, same
#      symbol check as 2; with TA_CUDA also with tileattn-cuda, as 3. Skipped with
#      a message when pkg-config is not installed
# Any failure stops the check with the failing command and its output.

cmake_minimum_required(VERSION 3.24)

include("${CMAKE_CURRENT_LIST_DIR}/script_run.cmake") # run(), script_args()
script_args(check_install_consumer BUILD_DIR SRC_DIR WORK_DIR)
if(NOT NM)
  find_program(NM nm REQUIRED)
endif()
set(prefix "${WORK_DIR}/prefix")

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# ---- 1. install ----
run(install COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}"
                    --config "${CONFIG}")
file(GLOB_RECURSE archives "${prefix}/*/libtileattn.a")
file(GLOB_RECURSE configs "${prefix}/*/tileattnConfig.cmake")
file(GLOB_RECURSE pcs "${prefix}/*/pkgconfig/tileattn.pc")
file(GLOB_RECURSE cuda_files "${prefix}/*/libtileattn_cuda.a" "${prefix}/*/tileattn-cuda.pc"
     "${prefix}/*/tileattnCudaTargets.cmake")
foreach(f "${prefix}/include/tileattn.h" "${prefix}/include/tileattn_tiling.h")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "install_consumer FAILED: ${f} not installed")
  endif()
endforeach()
foreach(what archives configs pcs)
  list(LENGTH ${what} n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "install_consumer FAILED: expected one installed file in '${what}', "
                        "found ${n}: ${${what}}")
  endif()
endforeach()
list(LENGTH cuda_files n_cuda)
if(TA_CUDA AND NOT n_cuda EQUAL 3)
  message(FATAL_ERROR "install_consumer FAILED: a CUDA build must install libtileattn_cuda.a, "
                      "tileattn-cuda.pc and tileattnCudaTargets.cmake; found: ${cuda_files}")
elseif(NOT TA_CUDA AND NOT n_cuda EQUAL 0)
  message(FATAL_ERROR "install_consumer FAILED: a build without CUDA installed ${cuda_files}")
endif()
message(STATUS "installed: ${archives}, ${configs}, ${pcs} ${cuda_files}")

# check_symbols(<exe> CORE|CUDA): CORE: no CUDA symbol at all (cudart and the CUDA
# component absent); CUDA: the CUDA component's table was linked (its anchor).
function(check_symbols exe kind)
  execute_process(COMMAND "${NM}" "${exe}" RESULT_VARIABLE rc OUTPUT_VARIABLE syms
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer FAILED: ${NM} ${exe}: ${err}")
  endif()
  file(SIZE "${exe}" size)
  string(REGEX MATCH "[ \t]_*cuda[A-Z][A-Za-z_]*" cudart_sym "${syms}")
  string(FIND "${syms}" " ta_cuda_backend_linked" at)
  if(kind STREQUAL "CORE" AND (cudart_sym OR NOT at EQUAL -1))
    message(FATAL_ERROR "install_consumer FAILED: the core-only consumer ${exe} links CUDA "
                        "('${cudart_sym}', anchor at ${at}): a CPU-only user must not get cudart")
  elseif(kind STREQUAL "CUDA" AND at EQUAL -1)
    message(FATAL_ERROR "install_consumer FAILED: ${exe} links tileattn::cuda but holds the "
                        "core's 'not linked' CUDA table (no ta_cuda_backend_linked): the link "
                        "line lost -Wl,-u,ta_cuda_backend_linked or the archive order")
  endif()
  message(STATUS "${exe}: ${size} bytes, symbols as expected for ${kind}")
endfunction()

# ---- 2, 3. find_package consumers: core only, then (CUDA) tileattn::cuda ----
function(find_package_consumer kind)
  set(consumer_build "${WORK_DIR}/build-${kind}")
  set(cuda_opt OFF)
  if(kind STREQUAL "CUDA")
    set(cuda_opt ON)
  endif()
  run(configure-${kind} COMMAND ${CMAKE_COMMAND} -S "${SRC_DIR}" -B "${consumer_build}"
                        "-DCMAKE_PREFIX_PATH=${prefix}" "-DTILEATTN_EXPECT_PREFIX=${prefix}"
                        "-DCMAKE_BUILD_TYPE=${CONFIG}" "-DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}"
                        "-DCONSUMER_CUDA=${cuda_opt}")
  run(build-${kind} COMMAND ${CMAKE_COMMAND} --build "${consumer_build}" --config "${CONFIG}")
  file(GLOB_RECURSE consumer_exe LIST_DIRECTORIES false "${consumer_build}/consumer"
       "${consumer_build}/consumer.exe" "${consumer_build}/*/consumer")
  list(FILTER consumer_exe EXCLUDE REGEX "/CMakeFiles/")
  if(NOT consumer_exe)
    message(FATAL_ERROR "install_consumer FAILED: built consumer not found in ${consumer_build}")
  endif()
  list(GET consumer_exe 0 consumer_exe)
  run(run-find-package-${kind} COMMAND "${consumer_exe}")
  message(STATUS "find_package consumer (${kind}): ${run_out}")
  check_symbols("${consumer_exe}" ${kind})
endfunction()
find_package_consumer(CORE)
if(TA_CUDA)
  find_package_consumer(CUDA)
endif()

# ---- 3. pkg-config consumer ----
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  message(STATUS "pkg-config not found: SKIPPING the pkg-config half of install_consumer "
                 "(apt-get install pkg-config)")
  return()
endif()
get_filename_component(pc_dir "${pcs}" DIRECTORY)
set(pc_env "PKG_CONFIG_PATH=${pc_dir}")

# The .pc must describe where it was installed, not where the build meant to
# install: `cmake --install --prefix` (and any relocation) relies on that.
run(pkg-config-prefix ENV ${pc_env} COMMAND "${PKG_CONFIG}" --variable=prefix tileattn)
string(STRIP "${run_out}" pc_prefix)
file(REAL_PATH "${prefix}" real_prefix)
if(EXISTS "${pc_prefix}")
  file(REAL_PATH "${pc_prefix}" pc_prefix)
endif()
if(NOT pc_prefix STREQUAL real_prefix)
  message(FATAL_ERROR "install_consumer FAILED: ${pcs} says prefix=${pc_prefix}, but it was "
                      "installed under ${real_prefix}. The .pc is not relocatable; derive the "
                      "prefix from its own location (prefix=\${pcfiledir}/<relative path>).")
endif()

# pkg_config_consumer(<package> CORE|CUDA): compile main.c with the package's
# flags (no --static: the .pc files list what a static archive needs in Libs).
function(pkg_config_consumer package kind)
  run(pkg-config-${package} ENV ${pc_env} COMMAND "${PKG_CONFIG}" --cflags --libs ${package})
  string(STRIP "${run_out}" pc_flags)
  message(STATUS "pkg-config --cflags --libs ${package}: ${pc_flags}")
  separate_arguments(pc_flags_list UNIX_COMMAND "${pc_flags}")
  set(lib_dirs "")
  foreach(flag IN LISTS pc_flags_list)
    if(flag MATCHES "^-L(.+)$")
      list(APPEND lib_dirs "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  string(REPLACE ";" ":" lib_path "${lib_dirs}")
  set(pc_exe "${WORK_DIR}/consumer_pkgconfig_${package}")
  run(compile-pkg-config-${package}
      COMMAND "${CMAKE_C_COMPILER}" -std=c11 -Wall -Wextra -Wpedantic -Werror
              "${SRC_DIR}/main.c" -o "${pc_exe}" ${pc_flags_list})
  # shared dependencies (libcudart.so with CUDA) from the -L dirs pkg-config gave
  if(NOT "$ENV{LD_LIBRARY_PATH}" STREQUAL "")
    string(APPEND lib_path ":$ENV{LD_LIBRARY_PATH}")
  endif()
  run(run-pkg-config-${package} ENV "LD_LIBRARY_PATH=${lib_path}" COMMAND "${pc_exe}")
  message(STATUS "pkg-config consumer (${package}): ${run_out}")
  check_symbols("${pc_exe}" ${kind})
endfunction()
pkg_config_consumer(tileattn CORE)
if(TA_CUDA)
  pkg_config_consumer(tileattn-cuda CUDA)
endif()
message(STATUS "install_consumer: passed (find_package and pkg-config, CUDA=${TA_CUDA})")
