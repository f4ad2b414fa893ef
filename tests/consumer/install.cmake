# consumer.install: a fresh `cmake --install BUILD --prefix PREFIX`.
# Usage: cmake -DBUILD=<build dir> -DPREFIX=<prefix> [-DCONFIG=<config>] -P install.cmake
file(REMOVE_RECURSE ${PREFIX})
set(config_args)
if(CONFIG)
  set(config_args --config ${CONFIG})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX} ${config_args}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD} --prefix ${PREFIX} failed (${rc}):\n${out}${err}")
endif()
string(REGEX MATCHALL "\n-- (Installing|Up-to-date): " files "\n${out}")
list(LENGTH files count)
message("installed ${count} files into ${PREFIX}")
