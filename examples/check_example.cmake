# Build and run one example against this build tree, installed:
#
#   cmake -DBUILD_DIR=<build tree> -DMODE=cpp_find_package|pkg_config -DSRC_DIR=<example dir>
#         -DWORK_DIR=<scratch> [-DCONFIG=Release] [-DCMAKE_C_COMPILER=cc]
#         -P examples/check_example.cmake
#
#   1. cmake --install BUILD_DIR --prefix WORK_DIR/prefix
#   2. cpp_find_package: configure SRC_DIR with CMAKE_PREFIX_PATH = the prefix, build,
#      run sdpa_cpp. pkg_config: copy SRC_DIR, `make` it with PKG_CONFIG_PATH = the
#      prefix's pkgconfig dir, run mta_pkg_config.
# A missing tool (C++ compiler, make, pkg-config) prints "example SKIPPED: ..."
# (CTest reports the test as skipped); any failure stops with the command's output.
cmake_minimum_required(VERSION 3.24)
include("${CMAKE_CURRENT_LIST_DIR}/../test/script_run.cmake") # run(), script_args()

script_args(check_example BUILD_DIR MODE SRC_DIR WORK_DIR)
set(prefix "${WORK_DIR}/prefix")

if(MODE STREQUAL "cpp_find_package")
  # the C++ compiler of the library's C compiler family: a library built with
  # clang links libomp's runtime (__kmpc_*), which g++'s -fopenmp does not
  get_filename_component(cc_name "${CMAKE_C_COMPILER}" NAME)
  if(cc_name MATCHES "clang")
    find_program(CXX NAMES clang++ c++ g++)
  else()
    find_program(CXX NAMES g++ c++ clang++)
  endif()
  if(NOT CXX)
    message("example SKIPPED: no C++ compiler (apt-get install g++)")
    return()
  endif()
elseif(MODE STREQUAL "pkg_config")
  find_program(PKG_CONFIG NAMES pkg-config pkgconf)
  find_program(MAKE NAMES make gmake)
  if(NOT PKG_CONFIG OR NOT MAKE)
    message("example SKIPPED: needs pkg-config and make (apt-get install pkg-config make)")
    return()
  endif()
else()
  message(FATAL_ERROR "check_example: unknown MODE '${MODE}'")
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
run(install COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}"
                    --config "${CONFIG}")

if(MODE STREQUAL "cpp_find_package")
  set(build "${WORK_DIR}/build")
  run(configure COMMAND ${CMAKE_COMMAND} -S "${SRC_DIR}" -B "${build}"
                        "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
                        "-DCMAKE_CXX_COMPILER=${CXX}")
  run(build COMMAND ${CMAKE_COMMAND} --build "${build}" --config "${CONFIG}")
  file(GLOB_RECURSE exe LIST_DIRECTORIES false "${build}/sdpa_cpp" "${build}/*/sdpa_cpp")
  list(FILTER exe EXCLUDE REGEX "/CMakeFiles/")
  if(NOT exe)
    message(FATAL_ERROR "FAILED: sdpa_cpp not built in ${build}")
  endif()
  list(GET exe 0 exe)
else()
  file(GLOB pc "${prefix}/*/pkgconfig/tileattn.pc")
  get_filename_component(pc_dir "${pc}" DIRECTORY)
  file(COPY "${SRC_DIR}/" DESTINATION "${WORK_DIR}/src")
  run(make ENV "PKG_CONFIG_PATH=${pc_dir}"
      COMMAND "${MAKE}" -C "${WORK_DIR}/src" "CC=${CMAKE_C_COMPILER}" "CFLAGS=-O2 -Werror")
  set(exe "${WORK_DIR}/src/mta_pkg_config")
endif()
run(run COMMAND "${exe}")
message(STATUS "${MODE}: ${run_out}")
