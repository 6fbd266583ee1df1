# The configure-time choices, each in a throwaway tree: CMake says whether the CUDA kernels and the
# hotpath command are built and why; the C ABI and the Python module configure without CLI11; the
# tests refuse to configure without it, saying so; HOTPATH_METRICS builds the Prometheus exporter or says
# why not.
#   cmake -DSOURCE_DIR= -DWORK_DIR= -DGENERATOR= -DC_COMPILER= -DCXX_COMPILER= -P options.cmake
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK_DIR}")

function(configure name expect_ok)
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/${name}" -G "${GENERATOR}"
                          "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
                          -DHOTPATH_BENCHMARKS=OFF -DHOTPATH_PYTHON=OFF -DHOTPATH_LLM=OFF ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure failed (${rc})\n${out}\n${err}")
  elseif(NOT expect_ok AND rc EQUAL 0)
    message(FATAL_ERROR "${name}: configure succeeded, expected a refusal\n${out}\n${err}")
  endif()
  set(output "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect name text)
  string(FIND "${output}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${name}: the configure output does not say '${text}':\n${output}")
  endif()
endfunction()

# No CUDA, no CLI, and CLI11 made unfindable: the libraries still configure.
configure(no_cli ON -DHOTPATH_CUDA=OFF -DHOTPATH_CLI=OFF -DHOTPATH_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON)
expect(no_cli "CUDA kernels: not built (HOTPATH_CUDA=OFF)")
expect(no_cli "hotpath command: not built (HOTPATH_CLI=OFF or no CLI11)")

# The CLI asked for but CLI11 missing: a warning, and built without it. CUDA as this machine has it.
configure(no_cli11 ON -DHOTPATH_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON)
expect(no_cli11 "CLI11 not found: building without the hotpath command")
expect(no_cli11 "hotpath command: not built")
find_program(nvcc nvcc)
if(nvcc)
  expect(no_cli11 "CUDA kernels: built (nvcc")
else()
  expect(no_cli11 "CUDA kernels: not built (HOTPATH_CUDA=ON but no nvcc found)")
endif()

# The tests need the command.
configure(tests_without_cli OFF -DHOTPATH_CUDA=OFF -DHOTPATH_CLI=OFF)
expect(tests_without_cli "the tests need the hotpath command and CLI11")
# The Prometheus exporter: off when asked, a refusal when required but missing, and a bad value named.
configure(metrics_off ON -DHOTPATH_CUDA=OFF -DHOTPATH_TESTS=OFF -DHOTPATH_METRICS=OFF)
expect(metrics_off "Prometheus exporter: not built (HOTPATH_METRICS=OFF)")
configure(metrics_missing OFF -DHOTPATH_CUDA=OFF -DHOTPATH_TESTS=OFF -DHOTPATH_METRICS=ON
          -DCMAKE_DISABLE_FIND_PACKAGE_prometheus-cpp=ON)
expect(metrics_missing "HOTPATH_METRICS=ON but prometheus-cpp")
configure(metrics_auto_missing ON -DHOTPATH_CUDA=OFF -DHOTPATH_TESTS=OFF -DCMAKE_DISABLE_FIND_PACKAGE_prometheus-cpp=ON)
expect(metrics_auto_missing "Prometheus exporter: not built (prometheus-cpp not found")
configure(metrics_bad OFF -DHOTPATH_CUDA=OFF -DHOTPATH_TESTS=OFF -DHOTPATH_METRICS=maybe)
expect(metrics_bad "HOTPATH_METRICS is AUTO, ON or OFF, not 'maybe'")
file(REMOVE_RECURSE "${WORK_DIR}")
