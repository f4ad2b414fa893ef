# OpenBLAS through its CBLAS interface (Debian: libopenblas-dev), as the
# imported target dtensor::openblas. Used by the build and, installed next to
# dtensorConfig.cmake, by find_package(dtensor): the static library needs it
# at link time, and the path is looked up on the consumer's machine rather
# than written into the package.
if(NOT TARGET dtensor::openblas)
  find_path(DTENSOR_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas
            DOC "The directory of OpenBLAS's cblas.h")
  find_library(DTENSOR_OPENBLAS_LIBRARY NAMES openblas DOC "OpenBLAS")
  mark_as_advanced(DTENSOR_CBLAS_INCLUDE_DIR DTENSOR_OPENBLAS_LIBRARY)
  if(DTENSOR_CBLAS_INCLUDE_DIR AND DTENSOR_OPENBLAS_LIBRARY)
    add_library(dtensor::openblas INTERFACE IMPORTED)
    set_target_properties(dtensor::openblas PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${DTENSOR_CBLAS_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${DTENSOR_OPENBLAS_LIBRARY}")
  endif()
endif()
