# Runs bitwise_program in the simulated world and under mpirun with the same
# arguments and fails unless both print exactly the same lines (the hashes
# of every result's bytes). -DSIM=cmd|args -DMPI=cmd|args (| separates).
string(REPLACE "|" ";" sim_command "${SIM}")
string(REPLACE "|" ";" mpi_command "${MPI}")
execute_process(COMMAND ${sim_command} RESULT_VARIABLE sim_rc OUTPUT_VARIABLE sim_out
                ERROR_VARIABLE sim_err TIMEOUT 120)
if(NOT sim_rc EQUAL 0)
  message(FATAL_ERROR "simulated run failed (${sim_rc}): ${sim_err}")
endif()
execute_process(COMMAND ${mpi_command} RESULT_VARIABLE mpi_rc OUTPUT_VARIABLE mpi_out
                ERROR_VARIABLE mpi_err TIMEOUT 120)
if(NOT mpi_rc EQUAL 0)
  message(FATAL_ERROR "MPI run failed (${mpi_rc}): ${mpi_err}")
endif()
if(sim_out STREQUAL "")
  message(FATAL_ERROR "the simulated run printed nothing")
endif()
if(NOT sim_out STREQUAL mpi_out)
  # Show the differing lines (diff is in every Debian system).
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/same_bits.sim.txt" "${sim_out}")
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/same_bits.mpi.txt" "${mpi_out}")
  execute_process(COMMAND diff "${CMAKE_CURRENT_BINARY_DIR}/same_bits.sim.txt"
                          "${CMAKE_CURRENT_BINARY_DIR}/same_bits.mpi.txt" OUTPUT_VARIABLE diff_out)
  message("< simulated, > MPI:\n${diff_out}")
  message(FATAL_ERROR "the simulated world and MPI gave different bits")
endif()
string(REGEX MATCHALL "\n" lines "${sim_out}")
list(LENGTH lines count)
message("${count} cases: the same bits in both worlds")
