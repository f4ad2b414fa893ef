# How dtensor's own targets compile in minutes (docs/testing.md, "Build
# times"): most of a library file's compile time is not its own code but
# the headers it parses and the templates it instantiates (-ftime-report on
# ops/pointwise.cc: parsing 43%, instantiation 25%), the same for every file
# of a folder. Two mechanisms share that work:
#
# - Unity batches: up to DTENSOR_UNITY_BATCH files of ONE folder compile as
#   one translation unit, so a batch parses and instantiates once (the four
#   files of src/optim: 11.3 s of CPU apart, 3.3 s as one unit). A batch is
#   one scope, so an internal name (anonymous namespace, `static`) is defined
#   by one file of a folder only: two such functions of one name would
#   become overloads of each other and a call could silently take the other
#   file's. scripts/check-unity-names (ctest unity.names) reads the sources'
#   definitions with ctags and fails on such a pair; a same-named variable
#   or class is a compile error in the batch itself.
#   8 files to a batch: the library's 35 units of 4 took 134 s of CPU, its
#   26 units of 8 114 s; the largest takes 15 s, which a rebuild after
#   touching one file waits for.
#   src/tensor's kernels are batched too (they were not until 2026-12-07),
#   but for the files whose time is code generation of hot loops: the four
#   with their own floating-point options (below) and the elementwise_*
#   families. In a batch GCC's inliner works to a budget for the whole unit:
#   batched, elementwise_arithmetic.cc's column-broadcast add ran ~20%
#   slower. The other 19 files are each small beside the tensor.h
#   templates they all instantiate: with the elementwise ones, the 24 took
#   58.8 s of CPU one by one and 40 s in 3 units. Batched, a plain
#   Tensor::view costs 476 instructions instead of 431 (docs/PERFORMANCE.md,
#   "The house and the unity build").
# - A precompiled header, parsed once per object library instead of once per
#   unit: the standard library and the DTensor API's headers for the
#   batches (cmake/dtensor_pch.h; -30% for a file alone), dtensor/tensor.h,
#   which they all include, for the kernels (cmake/dtensor_kernels_pch.h).
#
# A file that sets its own floating-point options with `#pragma GCC
# optimize` (no-trapping-math, fp-contract=off: simd.h, row_math.h) compiles
# alone and without the precompiled header: GCC drops such a pragma in a unit
# that includes a PCH, so exp, erf and sigmoid kept their clamps as branches
# and ran libm-speed scalar loops (7.5 ns per element for exp instead of
# ~0.3) while their AVX2/AVX-512 copies could contract into FMA; and in a
# unity batch the pragma would also change the files after it.
#
# A file named *_avx2.cc or *_avx512.cc is one instruction set's copy of
# code a caller dispatches to at run time (src/checkpoint/checksum_avx2.cc):
# it compiles alone with -mavx2 or -mavx512f and without the header. In a
# batch the flag would reach the other files, and the header's inline
# functions, compiled for that set, could become the program's only copy.
#
# Both are off in the sanitized build (the Makefile's asan-build): there
# every file compiles alone with only what it includes, which is the check
# that each file includes what it uses.
set(DTENSOR_UNITY_BATCH 8 CACHE STRING
    "Library files of one folder per unity translation unit (0: one per file)")
option(DTENSOR_PCH "Precompile the common headers of the library's files" ON)

# Sets up one of the library's object libraries: its precompiled header,
# and its sources (sorted, as file(GLOB) gives them) in unity groups of up
# to DTENSOR_UNITY_BATCH files of one src/ folder, but for the files with
# their own `#pragma GCC optimize`, which compile alone without the header.
function(dtensor_library_build_speed target pch_header)
  if(DTENSOR_PCH)
    target_precompile_headers(${target} PRIVATE ${pch_header})
  endif()
  get_target_property(sources ${target} SOURCES)
  set(folder "")
  set(index 0)
  foreach(src ${sources})
    if(src MATCHES "_(avx2|avx512)\\.cc$")
      set(isa_flag -mavx2)
      if(CMAKE_MATCH_1 STREQUAL "avx512")
        set(isa_flag -mavx512f)
      endif()
      set_source_files_properties(${src} PROPERTIES COMPILE_OPTIONS ${isa_flag}
                                  SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
      continue()
    endif()
    file(STRINGS ${src} pragma REGEX "^#pragma GCC optimize")
    if(pragma)
      set_source_files_properties(${src} PROPERTIES SKIP_PRECOMPILE_HEADERS ON
                                  SKIP_UNITY_BUILD_INCLUSION ON)
      continue()
    endif()
    get_filename_component(file_name ${src} NAME)
    if(file_name MATCHES "^elementwise_")  # src/tensor's hot loops (above)
      set_source_files_properties(${src} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      continue()
    endif()
    if(NOT DTENSOR_UNITY_BATCH)  # 0: every file alone (the sanitized build)
      continue()
    endif()
    get_filename_component(dir ${src} DIRECTORY)
    get_filename_component(name ${dir} NAME)
    if(NOT name STREQUAL folder)
      set(folder ${name})
      set(index 0)
    endif()
    math(EXPR group "${index} / ${DTENSOR_UNITY_BATCH}")
    set_source_files_properties(${src} PROPERTIES UNITY_GROUP "${name}_${group}")
    math(EXPR index "${index} + 1")
  endforeach()
  if(DTENSOR_UNITY_BATCH)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_MODE GROUP)
  endif()
endfunction()
