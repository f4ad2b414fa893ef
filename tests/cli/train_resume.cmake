# dtensor train saves checkpoints and resumes from them: runs SAVE (an
# uninterrupted training with --save-every and --bits) in a fresh WORK
# directory, then RESUME (--resume ck/step-FROM --bits, maybe on another
# mesh, scheme or world). Both must exit 0: the resumed run is checked
# against a one-process training that was never interrupted. With
# -DSAME_BITS=ON the resumed run's losses after step FROM and its final
# parameters must also equal the uninterrupted run's bit for bit.
# -DSAVE=cmd|args -DRESUME=cmd|args (| separates) -DWORK=dir -DFROM=k
string(REPLACE "|" ";" save_command "${SAVE}")
string(REPLACE "|" ";" resume_command "${RESUME}")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
execute_process(COMMAND ${save_command} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE save_out ERROR_VARIABLE err TIMEOUT 240)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the uninterrupted run failed (${rc}): ${save_out}${err}")
endif()
if(NOT EXISTS "${WORK}/ck/step-${FROM}/metadata.json")
  message(FATAL_ERROR "no checkpoint at ${WORK}/ck/step-${FROM}")
endif()
execute_process(COMMAND ${resume_command} WORKING_DIRECTORY "${WORK}" RESULT_VARIABLE rc
                OUTPUT_VARIABLE resume_out ERROR_VARIABLE err TIMEOUT 240)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the resumed run failed (${rc}): ${resume_out}${err}")
endif()
math(EXPR next "${FROM} + 1")
if(NOT resume_out MATCHES "^step ${next} loss ")
  message(FATAL_ERROR "the resumed run does not start at step ${next}:\n${resume_out}")
endif()
if(SAME_BITS)
  # The uninterrupted run's lines from step FROM+1 on.
  string(FIND "${save_out}" "step ${next} loss " at)
  string(SUBSTRING "${save_out}" ${at} -1 tail)
  string(REGEX REPLACE "fingerprint [0-9a-f]+\n" "" tail "${tail}")
  string(REGEX REPLACE "fingerprint [0-9a-f]+\n" "" resumed "${resume_out}")
  if(NOT tail STREQUAL resumed)
    message(FATAL_ERROR "the resumed run parted from the uninterrupted one:\n"
                        "uninterrupted:\n${tail}\nresumed:\n${resumed}")
  endif()
  message("the same bits as the uninterrupted run from step ${next} on")
endif()
file(REMOVE_RECURSE "${WORK}")
