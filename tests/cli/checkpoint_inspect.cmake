# The tests of `dtensor checkpoint inspect` on checkpoints saved by the
# make_checkpoint program (tests/cli/make_checkpoint.cc):
#   cmake -DEXE=<dtensor> -DMAKE=<make_checkpoint> -DDIR=<dir> -DCASE=<case>
#         [-DEXPECT=<regex>] -P checkpoint_inspect.cmake
# CASE make saves the example checkpoint into DIR (a fixture the read-only
# tests share). Every other case works in its own DIR: it saves a checkpoint
# there, damages it, and checks that inspect exits 1 with exactly one line
# on stderr, "dtensor checkpoint inspect: ..." matching EXPECT:
#   corrupt       one byte of a chunk inverted (then --json reports
#                 "verified": false, and --no-verify reads metadata.json only)
#   truncated     the data file cut inside the chunk
#   missing_file  the data file removed
#   bad_metadata  metadata.json not JSON (nothing on stdout)
#   missing_dir   DIR does not exist (nothing on stdout)

function(run_make)
  execute_process(COMMAND "${MAKE}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "make_checkpoint ${ARGN} failed (${rc}): ${out}${err}")
  endif()
endfunction()

# Runs inspect with ARGN and sets rc, out and err in the caller.
function(inspect)
  execute_process(COMMAND "${EXE}" checkpoint inspect ${ARGN}
                  RESULT_VARIABLE r OUTPUT_VARIABLE o ERROR_VARIABLE e)
  set(rc "${r}" PARENT_SCOPE)
  set(out "${o}" PARENT_SCOPE)
  set(err "${e}" PARENT_SCOPE)
endfunction()

# Exit status 1 and one stderr line "dtensor checkpoint inspect: ..." matching EXPECT.
function(expect_failure)
  if(NOT rc STREQUAL "1")
    message(FATAL_ERROR "expected exit status 1, got '${rc}'\nstdout: ${out}\nstderr: ${err}")
  endif()
  string(REGEX MATCHALL "\n" newlines "${err}")
  list(LENGTH newlines n)
  if(NOT n EQUAL 1 OR NOT err MATCHES "\n$")
    message(FATAL_ERROR "expected exactly one line on stderr, got ${n} newline(s): ${err}")
  endif()
  string(FIND "${err}" "dtensor checkpoint inspect: " at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "stderr does not start with 'dtensor checkpoint inspect: ': ${err}")
  endif()
  if(NOT err MATCHES "${EXPECT}")
    message(FATAL_ERROR "stderr does not match '${EXPECT}': ${err}")
  endif()
  message(STATUS "ok: ${err}")
endfunction()

if(CASE STREQUAL "missing_dir")
  file(REMOVE_RECURSE "${DIR}")
  inspect("${DIR}")
  expect_failure()
  if(NOT out STREQUAL "")
    message(FATAL_ERROR "expected nothing on stdout, got: ${out}")
  endif()
  return()
endif()

file(REMOVE_RECURSE "${DIR}")
get_filename_component(parent "${DIR}" DIRECTORY)
file(MAKE_DIRECTORY "${parent}")
run_make("${DIR}")
if(CASE STREQUAL "make")
  return()
endif()

# The data file and byte range of the first chunk of the first tensor.
inspect("${DIR}" --json --chunks --no-verify)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "inspect of the fresh checkpoint failed (${rc}): ${err}")
endif()
string(JSON tensor MEMBER "${out}" tensors 0)
string(JSON file GET "${out}" tensors "${tensor}" chunks 0 file)
string(JSON offset GET "${out}" tensors "${tensor}" chunks 0 byte_offset)
string(JSON size GET "${out}" tensors "${tensor}" chunks 0 byte_size)
message(STATUS "first chunk: '${tensor}' in ${file} bytes [${offset}, +${size})")

if(CASE STREQUAL "corrupt")
  math(EXPR at "${offset} + ${size} / 2")
  run_make(--flip-byte "${DIR}/${file}" ${at})
  inspect("${DIR}")
  expect_failure()
  if(NOT out MATCHES "checksums: verification FAILED\n$")
    message(FATAL_ERROR "stdout does not end with the failed check: ${out}")
  endif()
  inspect("${DIR}" --json)
  expect_failure()
  if(NOT out MATCHES "\"verified\": false")
    message(FATAL_ERROR "JSON does not say \"verified\": false: ${out}")
  endif()
  inspect("${DIR}" --no-verify)
  if(NOT rc STREQUAL "0" OR NOT out MATCHES "checksums: not verified")
    message(FATAL_ERROR "--no-verify should not read the data (${rc}): ${out}${err}")
  endif()
elseif(CASE STREQUAL "truncated")
  math(EXPR at "${offset} + ${size} / 2")
  run_make(--truncate "${DIR}/${file}" ${at})
  inspect("${DIR}")
  expect_failure()
elseif(CASE STREQUAL "missing_file")
  file(REMOVE "${DIR}/${file}")
  inspect("${DIR}")
  expect_failure()
elseif(CASE STREQUAL "bad_metadata")
  file(WRITE "${DIR}/metadata.json" "{\"format\": \"dtensor-checkpoint\", ")
  inspect("${DIR}")
  expect_failure()
  if(NOT out STREQUAL "")
    message(FATAL_ERROR "expected nothing on stdout, got: ${out}")
  endif()
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
