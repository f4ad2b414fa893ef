# Runs a C++ example (CPP) and its Python version (PYTHON SCRIPT); both must
# exit 0 and print the same lines.
#   cmake -DCPP=... -DPYTHON=python3 -DSCRIPT=x.py -P same_output.cmake
execute_process(COMMAND ${CPP} OUTPUT_VARIABLE cpp_out ERROR_VARIABLE cpp_err RESULT_VARIABLE cpp_rc)
execute_process(COMMAND ${PYTHON} ${SCRIPT} OUTPUT_VARIABLE py_out ERROR_VARIABLE py_err RESULT_VARIABLE py_rc)
if(NOT cpp_rc EQUAL 0)
  message(FATAL_ERROR "${CPP} exited ${cpp_rc}:\n${cpp_out}${cpp_err}")
endif()
if(NOT py_rc EQUAL 0)
  message(FATAL_ERROR "${SCRIPT} exited ${py_rc}:\n${py_out}${py_err}")
endif()
if(NOT py_out STREQUAL cpp_out)
  message(FATAL_ERROR "the outputs differ\n--- C++ (${CPP})\n${cpp_out}--- Python (${SCRIPT})\n${py_out}")
endif()
string(REGEX MATCHALL "\n" lines "${py_out}")
list(LENGTH lines n)
message(STATUS "the same ${n} lines:\n${py_out}")
