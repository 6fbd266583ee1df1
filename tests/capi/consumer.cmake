# The installed package as a separate project sees it: `cmake --install` of the build tree into a
# temporary prefix, then examples/c (a project enabling C only) and examples/cpp configured against it
# with CMAKE_PREFIX_PATH, built and run without LD_LIBRARY_PATH; the C example once more through
# pkg-config (skipped, saying so, where pkg-config is missing).
#   cmake -DBUILD_DIR= -DSOURCE_DIR= -DWORK_DIR= -DLIBDIR= -DGENERATOR= -DC_COMPILER= -DCXX_COMPILER=
#         -DVERSION= -DMODEL= -DBACKEND= -P consumer.cmake
cmake_minimum_required(VERSION 3.25)
set(prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run)
  cmake_parse_arguments(ARG "" "OUTPUT" "COMMAND" ${ARGN})
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=LD_LIBRARY_PATH ${ARG_COMMAND}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    list(JOIN ARG_COMMAND " " cmd)
    message(FATAL_ERROR "failed (${rc}): ${cmd}\n--- stdout\n${out}\n--- stderr\n${err}")
  endif()
  if(ARG_OUTPUT)
    set(${ARG_OUTPUT} "${out}" PARENT_SCOPE)
  endif()
endfunction()

run(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
foreach(f include/hotpath/hotpath.h include/hotpath/hotpath.hpp ${LIBDIR}/libhotpath.a ${LIBDIR}/pkgconfig/hotpath.pc
          ${LIBDIR}/cmake/hotpath/hotpathConfig.cmake ${LIBDIR}/cmake/hotpath/hotpathConfigVersion.cmake bin/hotpath)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "cmake --install did not install ${f}")
  endif()
endforeach()

foreach(example c cpp)
  run(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/${example}" -B "${WORK_DIR}/${example}" -G "${GENERATOR}"
              -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}"
              "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  run(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/${example}")
endforeach()

# The C program against libhotpath.so and against libhotpath.a, the C++ one: the same answers, and each
# showed its refusals (the programs exit 1 otherwise).
run(COMMAND "${WORK_DIR}/c/example_c" ${MODEL} ${BACKEND} OUTPUT c_shared)
run(COMMAND "${WORK_DIR}/c/example_c_static" ${MODEL} ${BACKEND} OUTPUT c_static)
run(COMMAND "${WORK_DIR}/cpp/example_cpp" ${MODEL} ${BACKEND} OUTPUT cpp)
message("example_c:\n${c_shared}")
message("example_cpp:\n${cpp}")

# The lines every program prints alike: the model, the engine, the outputs, the NaN tick's refusal.
function(answers out text)
  string(REGEX MATCHALL "[^\n]+" lines "${text}")
  list(FILTER lines INCLUDE REGEX "^(model|engine|tick|NaN tick|ticks consumed)")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()
answers(a_shared "${c_shared}")
answers(a_static "${c_static}")
answers(a_cpp "${cpp}")
string(FIND "${c_shared}" "hotpath ${VERSION}\n" at)
if(at EQUAL -1)
  message(FATAL_ERROR "example_c does not print the version ${VERSION}")
endif()
foreach(needle "tick 4:" "NaN tick: tick error: tick 5" "wrong length: invalid argument" "ticks consumed: 5")
  string(FIND "${c_shared}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "example_c's output lacks '${needle}'")
  endif()
endforeach()
if(NOT a_static STREQUAL a_shared)
  message(FATAL_ERROR "example_c_static answered differently:\n${c_static}")
endif()
if(NOT a_cpp STREQUAL a_shared)
  message(FATAL_ERROR "example_cpp answered differently from example_c:\n${cpp}")
endif()

find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message("pkg-config not found: the pkg-config compile of the C example is skipped")
  return()
endif()
set(pc_env "PKG_CONFIG_PATH=${prefix}/${LIBDIR}/pkgconfig")
run(COMMAND ${CMAKE_COMMAND} -E env ${pc_env} ${PKG_CONFIG} --modversion hotpath OUTPUT pc_version)
string(STRIP "${pc_version}" pc_version)
if(NOT pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config says hotpath ${pc_version}, expected ${VERSION}")
endif()
run(COMMAND ${CMAKE_COMMAND} -E env ${pc_env} ${PKG_CONFIG} --cflags --libs hotpath OUTPUT pc_flags)
run(COMMAND ${CMAKE_COMMAND} -E env ${pc_env} ${PKG_CONFIG} --variable=libdir hotpath OUTPUT pc_libdir)
string(STRIP "${pc_flags}" pc_flags)
string(STRIP "${pc_libdir}" pc_libdir)
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
run(COMMAND ${C_COMPILER} "${SOURCE_DIR}/examples/c/main.c" -o "${WORK_DIR}/example_c_pkgconfig" ${pc_flags}
            "-Wl,-rpath,${pc_libdir}" -lm)
run(COMMAND "${WORK_DIR}/example_c_pkgconfig" ${MODEL} ${BACKEND} OUTPUT c_pc)
answers(a_pc "${c_pc}")
if(NOT a_pc STREQUAL a_shared)
  message(FATAL_ERROR "the pkg-config build answered differently:\n${c_pc}")
endif()
message("pkg-config build: the same answers (${pc_flags})")
file(REMOVE_RECURSE "${WORK_DIR}")
