# Runs `dtensor train --json` (under mpirun, one rank per process) and
# checks each process's memory report against what the kernel measured: its
# resident set grew, from the first step to its high-water mark, by the
# bytes the report's allocator reserved over the same time, within
# [-10%, +MARGIN_MIB]. The margin is what dtensor's allocator does not see:
# OpenBLAS's and oneDNN's work buffers, MPI's, the threads' stacks (12-55
# MiB measured on 2-core Zen 5, 2026-12-07). Also checks that every rank's
# categories were reported, and fully_shard's buffers within the peak.
#   cmake -DCOMMAND="mpirun|-np|4|dtensor|train|--json|..." -DMARGIN_MIB=64 -P memory_report.cmake
string(REPLACE "|" ";" command "${COMMAND}")
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 240)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the run failed (${rc}): ${err}")
endif()
string(JSON n LENGTH "${out}" memory)
string(JSON ranks GET "${out}" ranks)
if(NOT n EQUAL ranks)
  message(FATAL_ERROR "the report has ${n} ranks, the run ${ranks}")
endif()
math(EXPR last "${n} - 1")
foreach(i RANGE ${last})
  foreach(key parameters gradients optimizer_state activations process_peak_reserved
              process_reserved_at_start process_resident_at_start process_peak_resident
              process_peak_allocated process_peak_unsharded_parameters
              process_peak_communication_buffers)
    string(JSON ${key} GET "${out}" memory ${i} ${key})
  endforeach()
  foreach(key parameters gradients optimizer_state activations)
    if(${key} LESS_EQUAL 0)
      message(FATAL_ERROR "rank ${i}: ${key} is ${${key}}")
    endif()
  endforeach()
  # fully_shard's buffers (the run is FSDP x TP) are counted, within the peak.
  foreach(key process_peak_unsharded_parameters process_peak_communication_buffers)
    if(${key} LESS_EQUAL 0 OR ${key} GREATER process_peak_allocated)
      message(FATAL_ERROR "rank ${i}: ${key} is ${${key}}, peak allocated "
                          "${process_peak_allocated}")
    endif()
  endforeach()
  math(EXPR predicted "(${process_peak_reserved} - ${process_reserved_at_start}) / 1048576")
  math(EXPR grew "(${process_peak_resident} - ${process_resident_at_start}) / 1048576")
  math(EXPR low "${predicted} - ${predicted} / 10")
  math(EXPR high "${predicted} + ${MARGIN_MIB}")
  message("rank ${i}: the resident set grew ${grew} MiB; the report's reserved bytes "
          "${predicted} MiB (accepted ${low} to ${high})")
  if(grew LESS low OR grew GREATER high)
    message(FATAL_ERROR "rank ${i}: the resident set grew ${grew} MiB but the report "
                        "reserved ${predicted} MiB (accepted ${low} to ${high} MiB)")
  endif()
endforeach()
