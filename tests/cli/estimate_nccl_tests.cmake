# `dtensor estimate --nccl-tests` with the samples of an 8-rank node
# (tests/estimate/nccl_tests/): on 8 ranks of FSDP, whose all_gathers and
# reduce_scatters span the node, the all_gathers (within the sample's
# sizes) are timed by the table, the rest by the model; the report says
# how many, and the step differs from the model's alone.
#   cmake -DDTENSOR=path/to/dtensor -DSAMPLES=dir -P estimate_nccl_tests.cmake
set(model estimate --mesh 8 --scheme fsdp --hidden 256 --heads 4 --layers 2 --seq 64 --batch 8
          --vocab 1024)
execute_process(COMMAND ${DTENSOR} ${model} RESULT_VARIABLE rc OUTPUT_VARIABLE alone
                ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "estimate failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${DTENSOR} ${model} --nccl-tests
                        ${SAMPLES}/all_reduce_perf_8.txt,${SAMPLES}/all_gather_perf_8.txt
                RESULT_VARIABLE rc OUTPUT_VARIABLE measured ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "estimate --nccl-tests failed (${rc}): ${err}")
endif()
if(NOT measured MATCHES "for collectives measured\ntimes \\(([0-9]+) of the step's ([0-9]+)\\) and alpha-beta for the rest")
  message(FATAL_ERROR "no line on the measured collectives:\n${measured}")
endif()
set(timed ${CMAKE_MATCH_1})
set(all ${CMAKE_MATCH_2})
if(timed EQUAL 0 OR NOT timed LESS all)
  message(FATAL_ERROR "${timed} of ${all} collectives timed by the tables, expected some "
                      "(the all_gathers) but not all (the reduce_scatters):\n${measured}")
endif()
string(REGEX MATCH "step [0-9.]+ [mu]?s" step_alone "${alone}")
string(REGEX MATCH "step [0-9.]+ [mu]?s" step_measured "${measured}")
if(step_alone STREQUAL step_measured)
  message(FATAL_ERROR "the same ${step_alone} with and without the tables")
endif()
if(alone MATCHES "measured\ntimes" OR NOT alone MATCHES "alpha-beta for collectives;\nnot yet checked")
  message(FATAL_ERROR "the model alone claims measurements:\n${alone}")
endif()
message(STATUS "ok: ${timed} of ${all} collectives from the tables; ${step_alone} -> ${step_measured}")
