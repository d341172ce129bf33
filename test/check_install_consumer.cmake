# Install the build tree and build a tiny consumer against the installed package,
# twice: through find_package(tileattn) and through pkg-config.
#
#   cmake -DBUILD_DIR=<build tree> -DSRC_DIR=<test/consumer> -DWORK_DIR=<scratch>
#         [-DCONFIG=Release] [-DCMAKE_C_COMPILER=cc] [-DTA_CUDA=ON|OFF]
#         -P check_install_consumer.cmake
#
#   1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix; the expected files exist
#   2. configure + build SRC_DIR (find_package(tileattn CONFIG REQUIRED), linking
#      tileattn::tileattn; with TA_CUDA the package brings CUDA::cudart), run it
#   3. compile SRC_DIR/main.c with `pkg-config --cflags --libs --static tileattn`
#      (PKG_CONFIG_PATH = the installed pkgconfig dir), run it; skipped with a
#      message when pkg-config is not installed
# Any failure stops the check with the failing command and its output.

cmake_minimum_required(VERSION 3.24)

foreach(var BUILD_DIR SRC_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_install_consumer: -D${var}= is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()
if(NOT CMAKE_C_COMPILER)
  set(CMAKE_C_COMPILER cc)
endif()
set(prefix "${WORK_DIR}/prefix")

# run(<step name> [ENV k=v ...] COMMAND ...): runs it, prints its output on failure.
function(run step)
  cmake_parse_arguments(R "" "" "ENV;COMMAND" ${ARGN})
  if(R_ENV)
    set(cmd ${CMAKE_COMMAND} -E env ${R_ENV} ${R_COMMAND})
  else()
    set(cmd ${R_COMMAND})
  endif()
  string(REPLACE ";" " " shown "${cmd}")
  message(STATUS "[${step}] ${shown}")
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer FAILED at step '${step}' (exit ${rc}):\n"
                        "  ${shown}\n---- stdout ----\n${out}\n---- stderr ----\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# ---- 1. install ----
run(install COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}"
                    --config "${CONFIG}")
file(GLOB_RECURSE archives "${prefix}/*/libtileattn.a")
file(GLOB_RECURSE configs "${prefix}/*/tileattnConfig.cmake")
file(GLOB_RECURSE pcs "${prefix}/*/pkgconfig/tileattn.pc")
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
message(STATUS "installed: ${archives}, ${configs}, ${pcs}")

# ---- 2. find_package consumer ----
set(consumer_build "${WORK_DIR}/build")
run(configure COMMAND ${CMAKE_COMMAND} -S "${SRC_DIR}" -B "${consumer_build}"
                      "-DCMAKE_PREFIX_PATH=${prefix}" "-DTILEATTN_EXPECT_PREFIX=${prefix}"
                      "-DCMAKE_BUILD_TYPE=${CONFIG}" "-DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}")
run(build COMMAND ${CMAKE_COMMAND} --build "${consumer_build}" --config "${CONFIG}")
file(GLOB_RECURSE consumer_exe LIST_DIRECTORIES false "${consumer_build}/consumer"
     "${consumer_build}/consumer.exe" "${consumer_build}/*/consumer")
list(FILTER consumer_exe EXCLUDE REGEX "/CMakeFiles/")
if(NOT consumer_exe)
  message(FATAL_ERROR "install_consumer FAILED: built consumer not found in ${consumer_build}")
endif()
list(GET consumer_exe 0 consumer_exe)
run(run-find-package COMMAND "${consumer_exe}")
message(STATUS "find_package consumer: ${run_out}")

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

run(pkg-config ENV ${pc_env} COMMAND "${PKG_CONFIG}" --cflags --libs --static tileattn)
string(STRIP "${run_out}" pc_flags)
message(STATUS "pkg-config --cflags --libs --static tileattn: ${pc_flags}")
separate_arguments(pc_flags_list UNIX_COMMAND "${pc_flags}")
if(TA_CUDA AND NOT pc_flags MATCHES "-lcudart")
  message(FATAL_ERROR "install_consumer FAILED: the library was built with CUDA but "
                      "pkg-config --static gives no -lcudart: ${pc_flags}")
endif()
set(lib_dirs "")
foreach(flag IN LISTS pc_flags_list)
  if(flag MATCHES "^-L(.+)$")
    list(APPEND lib_dirs "${CMAKE_MATCH_1}")
  endif()
endforeach()
string(REPLACE ";" ":" lib_path "${lib_dirs}")

set(pc_exe "${WORK_DIR}/consumer_pkgconfig")
run(compile-pkg-config COMMAND "${CMAKE_C_COMPILER}" -std=c11 -Wall -Wextra -Wpedantic -Werror
                               "${SRC_DIR}/main.c" -o "${pc_exe}" ${pc_flags_list})
# shared dependencies (libcudart.so with CUDA) from the -L dirs pkg-config gave
if(NOT "$ENV{LD_LIBRARY_PATH}" STREQUAL "")
  string(APPEND lib_path ":$ENV{LD_LIBRARY_PATH}")
endif()
run(run-pkg-config ENV "LD_LIBRARY_PATH=${lib_path}" COMMAND "${pc_exe}")
message(STATUS "pkg-config consumer: ${run_out}")
message(STATUS "install_consumer: passed (find_package and pkg-config, CUDA=${TA_CUDA})")
