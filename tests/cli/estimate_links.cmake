# `dtensor estimate --intra-node-bandwidth` and `--intra-node-latency` in
# place of the cluster's: ten times slower links within the node make the
# same step's communication take longer, and the compute does not change.
#   cmake -DDTENSOR=path/to/dtensor -P estimate_links.cmake
set(args estimate --mesh 2x2 --scheme fsdp+tp --layers 2 --hidden 256 --heads 4 --seq 128
    --batch 8 --vocab 512 --json)
execute_process(COMMAND ${DTENSOR} ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE fast
                ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "estimate failed (${rc}): ${err}")
endif()
execute_process(COMMAND ${DTENSOR} ${args} --intra-node-bandwidth 45 --intra-node-latency 30
                RESULT_VARIABLE rc OUTPUT_VARIABLE slow ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "estimate with slow links failed (${rc}): ${err}")
endif()
string(JSON comm_fast GET "${fast}" time communication_s)
string(JSON comm_slow GET "${slow}" time communication_s)
string(JSON compute_fast GET "${fast}" time compute_s)
string(JSON compute_slow GET "${slow}" time compute_s)
if(NOT comm_slow GREATER comm_fast)
  message(FATAL_ERROR "communication ${comm_slow} s on slow links, ${comm_fast} s on the preset's")
endif()
if(NOT compute_slow EQUAL compute_fast)
  message(FATAL_ERROR "compute ${compute_slow} s on slow links, ${compute_fast} s on the preset's")
endif()
