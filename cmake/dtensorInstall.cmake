# `cmake --install`: the headers, both libraries, the CMake package
# (find_package(dtensor) -> dtensor::dtensor, dtensor::dtensor_static,
# dtensor::dtensor_shared), dtensor.pc for pkg-config and the `dtensor`
# program. Every path is relative to the prefix, so one build installs
# anywhere (`cmake --install build --prefix DIR`); docs/install.md.
include(CMakePackageConfigHelpers)

set(DTENSOR_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dtensor)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dtensor DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h"
        # dtensor/mpi.h declares functions only an MPI build has.
        PATTERN "mpi.h" EXCLUDE)
if(DTENSOR_HAVE_MPI)
  install(FILES ${PROJECT_SOURCE_DIR}/include/dtensor/mpi.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/dtensor)
endif()

install(TARGETS dtensor dtensor_shared EXPORT dtensorTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_SKIP
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The libdtensor.so link (what -ldtensor finds) beside the versioned file.
install(TARGETS dtensor_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_ONLY)
install(EXPORT dtensorTargets NAMESPACE dtensor:: DESTINATION ${DTENSOR_CMAKE_DIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/dtensorConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/dtensorConfig.cmake
                              INSTALL_DESTINATION ${DTENSOR_CMAKE_DIR})
# 0.x: a minor release may break the API (as the SONAME says), so only the
# same major.minor satisfies find_package(dtensor 0.1).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/dtensorConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/dtensorConfig.cmake
              ${PROJECT_BINARY_DIR}/dtensorConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/dtensorOpenBLAS.cmake
              ${CMAKE_CURRENT_LIST_DIR}/dtensorOneDNN.cmake
        DESTINATION ${DTENSOR_CMAKE_DIR})

# pkg-config: -ldtensor finds the shared library; `pkg-config --static`
# adds what the static one needs (Requires.private, Libs.private), and the
# cflags of Requires.private (MPI's include path, for dtensor/mpi.h).
# The public headers need C++20: the cflags say so, as a
# find_package consumer gets cxx_std_20 from the target.
set(DTENSOR_PC_REQUIRES_PRIVATE openblas)
set(DTENSOR_PC_CFLAGS " -std=c++20")
set(DTENSOR_PC_LIBS "")
if(DTENSOR_HAVE_MPI)
  # Open MPI and MPICH install their .pc under these names; mpi-c is
  # Debian's alternative for whichever is the default.
  if(MPI_CXX_LIBRARIES MATCHES "openmpi")
    set(DTENSOR_PC_MPI ompi-c)
  elseif(MPI_CXX_LIBRARIES MATCHES "mpich")
    set(DTENSOR_PC_MPI mpich)
  else()
    set(DTENSOR_PC_MPI mpi-c)
  endif()
  string(APPEND DTENSOR_PC_REQUIRES_PRIVATE " ${DTENSOR_PC_MPI}")
  string(APPEND DTENSOR_PC_CFLAGS " -DDTENSOR_HAVE_MPI=1")
endif()
if(DTENSOR_SANITIZE)
  list(JOIN DTENSOR_SANITIZE_FLAGS " " flags)
  string(APPEND DTENSOR_PC_LIBS " ${flags}")
endif()
file(RELATIVE_PATH DTENSOR_PC_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" DTENSOR_PC_PREFIX "${DTENSOR_PC_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/dtensor.pc.in ${PROJECT_BINARY_DIR}/dtensor.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/dtensor.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

if(TARGET dtensor_cli)
  install(TARGETS dtensor_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
