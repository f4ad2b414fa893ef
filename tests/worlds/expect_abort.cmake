# Runs an MPI job that must fail: a non-zero exit status within TIMEOUT
# seconds and output matching EXPECT (a regex).
#   cmake -DCOMMAND="mpirun|-np|4|prog" -DEXPECT=<regex> -DTIMEOUT=60 -P expect_abort.cmake
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT ${TIMEOUT})
if(rc STREQUAL "0")
  message(FATAL_ERROR "expected the job to fail, it exited 0\nstdout: ${out}\nstderr: ${err}")
endif()
if(rc MATCHES "timeout|Process terminated due to timeout")
  message(FATAL_ERROR "the job did not end within ${TIMEOUT} s (a hang)\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "output does not match '${EXPECT}'\nstdout: ${out}\nstderr: ${err}")
endif()
message(STATUS "ok: exit '${rc}'")
