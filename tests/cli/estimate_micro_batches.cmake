# `dtensor estimate --micro-batches 2` against 1: the activations a rank
# holds about halve (one micro-batch's at a time, and a few small tensors
# each micro-batch makes alike: at most 55%) while the parameters do
# not change, and FSDP gathers its blocks once per micro-batch (twice the
# all_gathers in forward).
#   cmake -DDTENSOR=path/to/dtensor -P estimate_micro_batches.cmake
set(args estimate --mesh 2x2 --scheme fsdp+tp --layers 2 --hidden 256 --heads 4 --seq 128
    --batch 8 --vocab 512 --json)
foreach(k 1 2)
  execute_process(COMMAND ${DTENSOR} ${args} --micro-batches ${k}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE json_${k} ERROR_VARIABLE err TIMEOUT 120)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "estimate --micro-batches ${k} failed (${rc}): ${err}")
  endif()
  string(JSON act_${k} GET "${json_${k}}" roles 0 memory activations)
  string(JSON par_${k} GET "${json_${k}}" roles 0 memory parameters)
  string(JSON gather_${k} GET "${json_${k}}" roles 0 communication forward all_gather count)
endforeach()
math(EXPR half "${act_1} * 55 / 100")
if(NOT act_2 LESS_EQUAL half)
  message(FATAL_ERROR "activations ${act_2} with 2 micro-batches, ${act_1} with 1: expected at most ${half} (55%)")
endif()
if(NOT par_2 EQUAL par_1)
  message(FATAL_ERROR "parameters ${par_2} with 2 micro-batches, ${par_1} with 1")
endif()
math(EXPR twice "${gather_1} * 2")
if(NOT gather_2 EQUAL twice)
  message(FATAL_ERROR "${gather_2} forward all_gathers with 2 micro-batches, ${gather_1} with 1: expected ${twice}")
endif()
