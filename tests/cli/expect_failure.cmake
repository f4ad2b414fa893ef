# Runs a command that must fail at run time and checks what a script
# relies on: exit status STATUS (default 2), exactly one line on stderr
# matching EXPECT (a regex), and, when given, stdout matching STDOUT (what
# was printed before the failure). Optional:
#   -DSTDOUT_FILE=/dev/full   send stdout there (a write error)
#   -DSETUP=cmd|args          run first (must exit 0), e.g. to make a checkpoint
#   -DMAKE_FILE=path          create this file first (relative to WORK)
#   -DWORK=dir                a fresh working directory for both
#   cmake -DEXE=<program> -DARGS="train|--svg|/dev/full" -DEXPECT=<regex>
#         -P expect_failure.cmake
# ARGS and SETUP separate arguments with '|' because ';' does not survive add_test.
include("${CMAKE_CURRENT_LIST_DIR}/one_line_error.cmake")
string(REPLACE "|" ";" args "${ARGS}")
if(NOT DEFINED WORK)
  set(WORK "${CMAKE_CURRENT_BINARY_DIR}")
else()
  file(REMOVE_RECURSE "${WORK}")
  file(MAKE_DIRECTORY "${WORK}")
endif()
if(NOT DEFINED STATUS)
  set(STATUS 2)
endif()
if(DEFINED SETUP)
  string(REPLACE "|" ";" setup "${SETUP}")
  execute_process(COMMAND ${setup} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the setup failed (${rc}): ${out}${err}")
  endif()
endif()
if(DEFINED MAKE_FILE)
  get_filename_component(dir "${WORK}/${MAKE_FILE}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${WORK}/${MAKE_FILE}" "not a directory\n")
endif()
if(DEFINED STDOUT_FILE)
  execute_process(COMMAND "${EXE}" ${args} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                  OUTPUT_FILE "${STDOUT_FILE}" ERROR_VARIABLE err)
  set(out "")
else()
  execute_process(COMMAND "${EXE}" ${args} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
endif()
expect_one_line_error("${rc}" "${out}" "${err}" "${STATUS}" "" "${EXPECT}")
if(DEFINED STDOUT AND NOT out MATCHES "${STDOUT}")
  message(FATAL_ERROR "stdout does not match '${STDOUT}' (printed before the failure?):\n${out}")
endif()
message(STATUS "ok: ${err}")
