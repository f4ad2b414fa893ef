# Runs two commands, A and B (each a |-separated list: program|arg|...);
# both must exit 0 and print the same lines. The examples use it to compare
# a C++ example with its Python version, and a Python program in the
# simulated world with the same program under mpirun.
#   cmake "-DA=build/bin/example_x" "-DB=python3|x.py" -P same_output.cmake
string(REPLACE "|" ";" a "${A}")
string(REPLACE "|" ";" b "${B}")
execute_process(COMMAND ${a} OUTPUT_VARIABLE a_out ERROR_VARIABLE a_err RESULT_VARIABLE a_rc)
execute_process(COMMAND ${b} OUTPUT_VARIABLE b_out ERROR_VARIABLE b_err RESULT_VARIABLE b_rc)
if(NOT a_rc EQUAL 0)
  message(FATAL_ERROR "${a} exited ${a_rc}:\n${a_out}${a_err}")
endif()
if(NOT b_rc EQUAL 0)
  message(FATAL_ERROR "${b} exited ${b_rc}:\n${b_out}${b_err}")
endif()
if(NOT a_out STREQUAL b_out)
  message(FATAL_ERROR "the outputs differ\n--- ${a}\n${a_out}--- ${b}\n${b_out}")
endif()
string(REGEX MATCHALL "\n" lines "${a_out}")
list(LENGTH lines n)
message(STATUS "the same ${n} lines:\n${a_out}")
