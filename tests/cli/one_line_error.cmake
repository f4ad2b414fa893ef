# What every failing `dtensor` command owes a script, checked in one place
# for the scripts of tests/cli/: exit status `status`, exactly one line on
# stderr, starting with `prefix` (when not empty) and matching `expect` (a
# regex, when not empty). `out` is only shown when the status is wrong.
function(expect_one_line_error rc out err status prefix expect)
  if(NOT rc STREQUAL "${status}")
    message(FATAL_ERROR "expected exit status ${status}, got '${rc}'\nstdout: ${out}\nstderr: ${err}")
  endif()
  string(REGEX MATCHALL "\n" newlines "${err}")
  list(LENGTH newlines n)
  if(NOT n EQUAL 1 OR NOT err MATCHES "\n$")
    message(FATAL_ERROR "expected exactly one line on stderr, got ${n} newline(s): ${err}")
  endif()
  if(NOT prefix STREQUAL "")
    string(FIND "${err}" "${prefix}" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "stderr does not start with '${prefix}': ${err}")
    endif()
  endif()
  if(NOT expect STREQUAL "" AND NOT err MATCHES "${expect}")
    message(FATAL_ERROR "stderr does not match '${expect}': ${err}")
  endif()
endfunction()
