# Runs a command-line program that should reject its arguments and checks the
# contract scripts rely on: exit status exactly 2, nothing on stdout, and
# exactly one line on stderr that starts with PREFIX (and matches EXPECT, a
# regex, when given).
#   cmake -DEXE=<program> -DARGS="visualize|--mesh|4y2" -DPREFIX="dtensor visualize: "
#         [-DEXPECT=<regex>] -P expect_usage_error.cmake
# ARGS separates arguments with '|' because ';' does not survive add_test.
# Bytes a test cannot spell in CMake: @XFF@ and @XFE@ are the (invalid UTF-8)
# bytes 0xff and 0xfe, @LONG@ is an argument of 100000 'a's.
include("${CMAKE_CURRENT_LIST_DIR}/one_line_error.cmake")
string(ASCII 255 xff)
string(ASCII 254 xfe)
string(REPEAT "a" 100000 long)
string(REPLACE "@XFF@" "${xff}" ARGS "${ARGS}")
string(REPLACE "@XFE@" "${xfe}" ARGS "${ARGS}")
string(REPLACE "@LONG@" "${long}" ARGS "${ARGS}")
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${EXE}" ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
expect_one_line_error("${rc}" "${out}" "${err}" 2 "${PREFIX}" "${EXPECT}")
if(NOT out STREQUAL "")
  message(FATAL_ERROR "expected nothing on stdout, got: ${out}")
endif()
message(STATUS "ok: ${err}")
