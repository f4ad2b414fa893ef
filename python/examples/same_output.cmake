# Runs two commands, A and B (each a |-separated list: program|arg|...);
# both must exit 0 and print the same lines. The examples use it to compare
# a C++ example with its Python version, and a Python program in the
# simulated world with the same program under mpirun.
#   cmake "-DA=build/bin/example_x" "-DB=python3|x.py" -P same_output.cmake
# With -DEVERY=N -DOUT=DIR, B is N processes that each print A's lines (a
# PyTorch-style script prints on every rank), launched with mpirun
# --output-filename DIR (their lines would mix on one stream): each
# process's file must hold exactly A's lines.
string(REPLACE "|" ";" a "${A}")
string(REPLACE "|" ";" b "${B}")
if(DEFINED OUT)
  file(REMOVE_RECURSE "${OUT}")  # no file of an earlier run stands in for this one's
endif()
execute_process(COMMAND ${a} OUTPUT_VARIABLE a_out ERROR_VARIABLE a_err RESULT_VARIABLE a_rc)
execute_process(COMMAND ${b} OUTPUT_VARIABLE b_out ERROR_VARIABLE b_err RESULT_VARIABLE b_rc)
if(NOT a_rc EQUAL 0)
  message(FATAL_ERROR "${a} exited ${a_rc}:\n${a_out}${a_err}")
endif()
if(NOT b_rc EQUAL 0)
  message(FATAL_ERROR "${b} exited ${b_rc}:\n${b_out}${b_err}")
endif()
if(DEFINED EVERY)
  # Each process's own output, as mpirun --output-filename OUT wrote it.
  foreach(rank RANGE 1 ${EVERY})
    math(EXPR r "${rank} - 1")
    set(file "${OUT}/1/rank.${r}/stdout")
    if(NOT EXISTS "${file}")
      message(FATAL_ERROR "${b} wrote no ${file}")
    endif()
    file(READ "${file}" rank_out)
    if(NOT a_out STREQUAL rank_out)
      message(FATAL_ERROR "process ${r} printed other lines\n--- ${a}\n${a_out}--- ${file}\n"
                          "${rank_out}")
    endif()
  endforeach()
elseif(NOT a_out STREQUAL b_out)
  message(FATAL_ERROR "the outputs differ\n--- ${a}\n${a_out}--- ${b}\n${b_out}")
endif()
string(REGEX MATCHALL "\n" lines "${a_out}")
list(LENGTH lines n)
message(STATUS "the same ${n} lines:\n${a_out}")
