# Runs bitwise_program in the simulated world and under mpirun with the same
# arguments and fails unless both print exactly the same lines (the hashes
# of every result's bytes). -DSIM=cmd|args -DMPI=cmd|args (| separates).
# -DNAMES="a;b" renames the two runs in messages (default: the simulated
# world and MPI), e.g. for two thread counts.
if(NOT DEFINED NAMES)
  set(NAMES "the simulated world;MPI")
endif()
list(GET NAMES 0 sim_name)
list(GET NAMES 1 mpi_name)
string(REPLACE "|" ";" sim_command "${SIM}")
string(REPLACE "|" ";" mpi_command "${MPI}")
execute_process(COMMAND ${sim_command} RESULT_VARIABLE sim_rc OUTPUT_VARIABLE sim_out
                ERROR_VARIABLE sim_err TIMEOUT 120)
if(NOT sim_rc EQUAL 0)
  message(FATAL_ERROR "the run in ${sim_name} failed (${sim_rc}): ${sim_err}")
endif()
execute_process(COMMAND ${mpi_command} RESULT_VARIABLE mpi_rc OUTPUT_VARIABLE mpi_out
                ERROR_VARIABLE mpi_err TIMEOUT 120)
if(NOT mpi_rc EQUAL 0)
  message(FATAL_ERROR "the run in ${mpi_name} failed (${mpi_rc}): ${mpi_err}")
endif()
if(sim_out STREQUAL "")
  message(FATAL_ERROR "the run in ${sim_name} printed nothing")
endif()
if(NOT sim_out STREQUAL mpi_out)
  # Show the differing lines (diff is in every Debian system).
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/same_bits.sim.txt" "${sim_out}")
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/same_bits.mpi.txt" "${mpi_out}")
  execute_process(COMMAND diff "${CMAKE_CURRENT_BINARY_DIR}/same_bits.sim.txt"
                          "${CMAKE_CURRENT_BINARY_DIR}/same_bits.mpi.txt" OUTPUT_VARIABLE diff_out)
  message("< ${sim_name}, > ${mpi_name}:\n${diff_out}")
  message(FATAL_ERROR "${sim_name} and ${mpi_name} gave different bits")
endif()
string(REGEX MATCHALL "\n" lines "${sim_out}")
list(LENGTH lines count)
message("${count} lines: the same bits in ${sim_name} and ${mpi_name}")
