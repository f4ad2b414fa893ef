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
# LLVM's linker where Debian's lld is installed (scripts/install-deps): the
# project links some 40 programs against the static library, and after a
# change to one library file every one of them links again; lld links
# world_tests in 0.3 s where GNU ld takes 0.8 s, and a rebuild after
# touching one op file takes 12 s instead of 16 (docs/testing.md, "Build
# times"). The libraries' users keep their own linker.
include(CheckLinkerFlag)
check_linker_flag(CXX -fuse-ld=lld DTENSOR_HAVE_LLD)
if(DTENSOR_HAVE_LLD)
  target_link_options(dtensor_flags INTERFACE -fuse-ld=lld)
endif()
if(DTENSOR_NATIVE)
  target_compile_options(dtensor_flags INTERFACE -march=native)
endif()
set(DTENSOR_SANITIZE_FLAGS -fsanitize=address,undefined)
if(DTENSOR_SANITIZE)
  target_compile_options(dtensor_flags INTERFACE ${DTENSOR_SANITIZE_FLAGS} -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(dtensor_flags INTERFACE ${DTENSOR_SANITIZE_FLAGS})
endif()
