# `make deb` (cpack -G DEB): one package, dtensor, holding everything
# `cmake --install` installs. Depends, as a Debian packager would set them:
# - the libraries' and the program's run-time dependencies, found by
#   dpkg-shlibdeps (dpkg-dev) from the ELF files: libc6, libstdc++6,
#   libgcc-s1, libopenblas0-pthread | libopenblas0 (through libopenblas.so.0's
#   alternatives), libdnnl2, libgomp1, libopenmpi3 in an MPI build;
# - what the headers, the CMake package and dtensor.pc need to compile and
#   link a program: libopenblas-dev, libdnnl-dev and, with MPI, libopenmpi-dev (which
#   find_dependency(MPI), Requires.private: ompi-c and dtensor/mpi.h use).
set(CPACK_PACKAGE_NAME dtensor)
set(CPACK_PACKAGE_VENDOR "dtensor developers")
set(CPACK_PACKAGE_CONTACT "dtensor developers <dtensor@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "distributed tensors (device mesh + Shard/Replicate/Partial) in C++20")
set(CPACK_PACKAGE_DESCRIPTION
    "dtensor models PyTorch's DTensor in native code: one logical tensor laid out
over an n-dimensional mesh of ranks (simulated in one process, or one per MPI
process). This package holds the headers, the shared and static libraries,
the CMake package (find_package(dtensor)), dtensor.pc and the dtensor program.")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # dtensor_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # the shlibs file for libdtensor.so.0.1
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libopenblas-dev, libdnnl-dev")
if(DTENSOR_HAVE_MPI)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libopenmpi-dev")
endif()
if(DTENSOR_BUILD_PYTHON)
  # The extension is built for one Python minor version's ABI (Debian's
  # python3 (>= 3.11~), python3 (<< 3.12) form).
  math(EXPR next_minor "${Python_VERSION_MINOR} + 1")
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS
         ", python3 (>= ${Python_VERSION_MAJOR}.${Python_VERSION_MINOR}~),"
         " python3 (<< ${Python_VERSION_MAJOR}.${next_minor})")
endif()
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "g++, cmake | pkg-config")
if(DTENSOR_BUILD_PYTHON)
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS ", python3-numpy")
endif()
if(DTENSOR_HAVE_MPI)
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS ", openmpi-bin")
endif()
include(CPack)
