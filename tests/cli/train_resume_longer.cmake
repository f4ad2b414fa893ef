# dtensor train continues a run for more --steps than it was saved with
# (docs/training.md, "Training longer"): a run of 8 steps saves ck/step-4;
# it is resumed for 12 steps (the schedule rebuilt for 12 from step 4 on),
# saving ck2/step-8; that is resumed for 16. Each resumed run must exit 0,
# verified against a one-process training that never stopped and switched
# schedules at the same steps (--tolerance 1e-5: measured 2.4e-7; a training
# on the new schedule from step 0 parts by 1.4e-2), and start at the step after
# its checkpoint.
# -DTRAIN=cmd|args (| separates; the model's options) -DWORK=dir
string(REPLACE "|" ";" train "${TRAIN}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
function(run expect_first)
  execute_process(COMMAND ${train} ${ARGN} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 240)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "'${ARGN}' failed (${rc}): ${out}${err}")
  endif()
  if(NOT out MATCHES "^step ${expect_first} loss ")
    message(FATAL_ERROR "'${ARGN}' does not start at step ${expect_first}:\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()
run(1 --steps 8 --save-every 4 --checkpoint-dir ck)
run(5 --steps 12 --resume ck/step-4 --save-every 4 --checkpoint-dir ck2)
if(NOT out MATCHES "step 12 loss ")
  message(FATAL_ERROR "the run resumed for 12 steps stopped early:\n${out}")
endif()
run(9 --steps 16 --resume ck2/step-8)
if(NOT out MATCHES "step 16 loss ")
  message(FATAL_ERROR "the run resumed for 16 steps stopped early:\n${out}")
endif()
file(REMOVE_RECURSE "${WORK}")
