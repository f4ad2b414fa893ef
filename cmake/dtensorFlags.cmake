# Flags for dtensor's own targets (the library's objects, the CLI, examples,
# tests, benchmarks), carried by the internal interface target dtensor_flags
# so that a parent project that add_subdirectory()s dtensor keeps its own
# flags: nothing here is global. Only the sanitizers reach consumers, as the
# libraries' link options (an instrumented library needs the runtime).
option(DTENSOR_WERROR "Treat warnings as errors (the Makefile's test and asan builds, hence CI)" OFF)

add_library(dtensor_flags INTERFACE)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(dtensor_flags INTERFACE -Wall -Wextra -Wno-unused-parameter)
  if(DTENSOR_WERROR)
    target_compile_options(dtensor_flags INTERFACE -Werror)
  endif()
endif()
# The linker stays GNU ld: Debian 12's lld (14) links the programs 2.5x
# faster, but in its world_tests an exception thrown from a function's cold
# part (GCC's hot/cold splitting) found no handler and ended the program
# (CheckpointTest.SaveRefusesToReplaceAnotherDirectory; docs/testing.md,
# "Build times").
if(DTENSOR_NATIVE)
  target_compile_options(dtensor_flags INTERFACE -march=native)
endif()
set(DTENSOR_SANITIZE_FLAGS -fsanitize=address,undefined)
if(DTENSOR_SANITIZE)
  target_compile_options(dtensor_flags INTERFACE ${DTENSOR_SANITIZE_FLAGS} -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(dtensor_flags INTERFACE ${DTENSOR_SANITIZE_FLAGS})
endif()
