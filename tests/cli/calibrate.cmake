# `dtensor calibrate` under mpirun, then `dtensor estimate --calibration`
# with its file: the file names the measured rates and collectives (every
# size, over the job's 2 ranks), and the estimate reads
# them (its cluster is "calibrated", its step a positive time).
#   cmake -DMPIRUN="mpirun|-np|2" -DDTENSOR=path/to/dtensor -DWORK=dir -P calibrate.cmake
string(REPLACE "|" ";" mpirun "${MPIRUN}")
file(MAKE_DIRECTORY "${WORK}")
set(file "${WORK}/calibration.json")
execute_process(COMMAND ${mpirun} ${DTENSOR} calibrate --out ${file} --matmul-size 64
                        --stream-elements 65536 --max-bytes 16384 --reps 3
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "calibrate failed (${rc}): ${out} ${err}")
endif()
file(READ "${file}" json)
foreach(key memory_bandwidth op_overhead matmul_efficiency share)
  string(JSON v GET "${json}" device ${key})
  if(NOT v GREATER 0)
    message(FATAL_ERROR "device.${key} is ${v}, not positive: ${json}")
  endif()
endforeach()
string(JSON n LENGTH "${json}" measured)
# all_gather, all_reduce, reduce_scatter at 1, 4 and 16 KiB over 2 ranks.
if(NOT n EQUAL 9)
  message(FATAL_ERROR "${n} measured collectives, expected 9: ${json}")
endif()
execute_process(COMMAND ${DTENSOR} estimate --mesh 2 --scheme fsdp --hidden 64 --heads 4
                        --layers 2 --seq 32 --vocab 64 --calibration ${file} --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE est ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "estimate --calibration failed (${rc}): ${err}")
endif()
string(JSON cluster GET "${est}" cluster)
string(JSON step GET "${est}" time step_s)
if(NOT cluster STREQUAL "calibrated" OR NOT step GREATER 0)
  message(FATAL_ERROR "estimate: cluster ${cluster}, step ${step}s: ${est}")
endif()
