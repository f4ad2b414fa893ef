# oneDNN (Debian: libdnnl-dev), as the imported target dtensor::onednn: the
# float32 and bfloat16 matrix products (src/tensor/onednn_gemm.cc says why).
# Debian builds it on OpenMP (libgomp); dtensor calls omp_set_num_threads to
# keep each product on its calling thread, so it links libgomp itself. Used
# by the build and, installed next to dtensorConfig.cmake, by
# find_package(dtensor), as dtensorOpenBLAS.cmake.
if(NOT TARGET dtensor::onednn)
  find_path(DTENSOR_DNNL_INCLUDE_DIR oneapi/dnnl/dnnl.h DOC "The directory of oneDNN's headers")
  find_library(DTENSOR_DNNL_LIBRARY NAMES dnnl DOC "oneDNN")
  find_package(OpenMP QUIET COMPONENTS CXX)
  mark_as_advanced(DTENSOR_DNNL_INCLUDE_DIR DTENSOR_DNNL_LIBRARY)
  if(DTENSOR_DNNL_INCLUDE_DIR AND DTENSOR_DNNL_LIBRARY AND OpenMP_gomp_LIBRARY)
    add_library(dtensor::onednn INTERFACE IMPORTED)
    set_target_properties(dtensor::onednn PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${DTENSOR_DNNL_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "${DTENSOR_DNNL_LIBRARY};${OpenMP_gomp_LIBRARY}")
  endif()
endif()
