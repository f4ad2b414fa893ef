# A checkpoint saved in the simulated world holds the same bytes as one
# saved by MPI processes, file for file, metadata.json included
# (checkpoint_crash's save mode, tests/worlds/faults/checkpoint_crash.cc):
# the simulated world writes its ranks' files on the thread pool, MPI one
# rank per process.
# -DMPI=mpirun|-np|N -DPROGRAM=path -DWORK=dir
string(REPLACE "|" ";" mpi "${MPI}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
function(save name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the save in ${name} ('${ARGN}') failed (${rc}):\n${out}${err}")
  endif()
endfunction()
# Several threads, whatever the machine: the ranks' writes then overlap.
save("the simulated world" ${CMAKE_COMMAND} -E env DTENSOR_NUM_THREADS=3
     ${PROGRAM} save ${WORK}/sim 7)
save(MPI ${mpi} ${PROGRAM} save ${WORK}/mpi 7)
file(GLOB sim_files RELATIVE "${WORK}/sim" "${WORK}/sim/*")
file(GLOB mpi_files RELATIVE "${WORK}/mpi" "${WORK}/mpi/*")
if(NOT sim_files STREQUAL mpi_files)
  message(FATAL_ERROR "the simulated world wrote ${sim_files}, MPI ${mpi_files}")
endif()
list(LENGTH sim_files count)
if(count LESS 3)
  message(FATAL_ERROR "expected metadata.json and several data files, got ${sim_files}")
endif()
foreach(name ${sim_files})
  file(SHA256 "${WORK}/sim/${name}" sim_hash)
  file(SHA256 "${WORK}/mpi/${name}" mpi_hash)
  if(NOT sim_hash STREQUAL mpi_hash)
    message(FATAL_ERROR "${name} differs between the simulated world and MPI")
  endif()
endforeach()
message("${count} files, the same bytes in the simulated world and under MPI: ${sim_files}")
