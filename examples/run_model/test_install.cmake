# ctest example_run_model: installs Kiln's SDK component into a fresh prefix, configures and
# builds examples/run_model against it with find_package(kiln) (EXAMPLE_FLAGS: the sanitizer
# flags of a sanitized build), and runs it. The expected sum:
# the input cycles -2..2 over 192 values, so channels 0, 1, 2 have positive sums 37, 38, 39;
# output channel o = relu(input channel o % 3): 37 + 38 + 39 + 37 = 151.
file(REMOVE_RECURSE ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install ${KILN_BUILD_DIR} --prefix ${WORK_DIR}/prefix --component sdk)
run(${CMAKE_COMMAND} -S ${KILN_SOURCE_DIR}/examples/run_model -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}
    -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS=${EXAMPLE_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${EXAMPLE_FLAGS}")
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${WORK_DIR}/build/run_model --make ${WORK_DIR}/example.kiln)
message(STATUS "${last_output}")
if(NOT last_output MATCHES " \\[1, 4, 8, 8\\] sum=151\n")
  message(FATAL_ERROR "unexpected output: ${last_output}")
endif()
