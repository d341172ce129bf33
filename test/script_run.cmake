# Shared by the -P scripts that build and run consumers (test/check_install_consumer.cmake,
# examples/check_example.cmake).

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
    message(FATAL_ERROR "FAILED at step '${step}' (exit ${rc}):\n"
                        "  ${shown}\n---- stdout ----\n${out}\n---- stderr ----\n${err}")
  endif()
  set(run_out "${out}" PARENT_SCOPE)
endfunction()


# script_args(<script name> <required var>...): fail unless each -D<var>= is set;
# default CONFIG (Release) and CMAKE_C_COMPILER (cc). A macro: sets the caller's.
macro(script_args script)
  foreach(_var ${ARGN})
    if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
      message(FATAL_ERROR "${script}: -D${_var}= is required")
    endif()
  endforeach()
  if(NOT CONFIG)
    set(CONFIG Release)
  endif()
  if(NOT CMAKE_C_COMPILER)
    set(CMAKE_C_COMPILER cc)
  endif()
endmacro()
