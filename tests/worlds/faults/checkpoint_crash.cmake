# A rank killed at random points of a checkpoint save never costs the
# previous checkpoint (tests/worlds/faults/checkpoint_crash.cc):
#   1. the MPI job saves version 1 into DIR;
#   2. for each point of a save, a job saving version 2 has one rank (drawn
#      with SEED) SIGKILL itself there; the job must fail, and DIR must
#      still load as version 1 - in the simulated world of 4 ranks;
#   3. a job that is not killed saves version 3, which then loads.
# -DMPI=mpirun|-np|N -DPROGRAM=path -DNP=N -DWORK=dir -DSEED=k
string(REPLACE "|" ";" mpi "${MPI}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(dir "${WORK}/ckpt")
function(run expect_ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "'${ARGN}' failed (${rc}):\n${out}${err}")
  endif()
  if(NOT expect_ok AND rc EQUAL 0)
    message(FATAL_ERROR "'${ARGN}' was to be killed but succeeded:\n${out}${err}")
  endif()
  if(NOT expect_ok AND NOT err MATCHES "checkpoint_crash: killing rank")
    message(FATAL_ERROR "'${ARGN}' did not reach its kill point (${rc}):\n${out}${err}")
  endif()
endfunction()
run(TRUE ${mpi} ${PROGRAM} save ${dir} 1)
string(RANDOM LENGTH 4 ALPHABET 0123456789 RANDOM_SEED ${SEED} unused)
foreach(point prepare write written metadata publish)
  # prepare, metadata and publish happen on rank 0 only; write (before a
  # chunk) and written (after the file's fsync) on every rank that writes.
  set(rank 0)
  if(point STREQUAL "write" OR point STREQUAL "written")
    string(RANDOM LENGTH 1 ALPHABET 0123 rank)
    math(EXPR rank "${rank} % ${NP}")
  endif()
  set(nth 1)
  message("killing rank ${rank} at ${point} #${nth}")
  run(FALSE ${mpi} ${PROGRAM} crash ${dir} 2 ${point} ${rank} ${nth})
  run(TRUE ${PROGRAM} check ${dir} 1)
endforeach()
run(TRUE ${mpi} ${PROGRAM} save ${dir} 3)
run(TRUE ${PROGRAM} check ${dir} 3)
run(TRUE ${mpi} ${PROGRAM} check ${dir} 3)
if(EXISTS "${dir}.partial")
  message(FATAL_ERROR "${dir}.partial is left after a save that succeeded")
endif()
file(REMOVE_RECURSE "${WORK}")
message("the previous checkpoint survived a rank killed at every point of a save")
