# `cmake --install <build> [--prefix <dir>]`: the `hotpath` CLI, the C ABI's header (and the C++
# wrapper over it), libhotpath.so and the bundled libhotpath.a, a CMake package (find_package(hotpath
# CONFIG): hotpath::hotpath is the shared library, hotpath::hotpath_static the archive) and hotpath.pc.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HOTPATH_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/hotpath")

if(HOTPATH_CLI)
  install(TARGETS hotpath RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(FILES include/hotpath/hotpath.h include/hotpath/hotpath.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hotpath)
install(TARGETS hotpath_shared EXPORT hotpathTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/lib/libhotpath.a DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(EXPORT hotpathTargets NAMESPACE hotpath:: DESTINATION ${HOTPATH_INSTALL_CMAKEDIR})

# What a static link needs besides libhotpath.a (the C++ runtime for the C++ inside, the threads,
# dlopen and clock libraries the CPU backend and the CUDA runtime use).
set(HOTPATH_STATIC_LINK_LIBS stdc++ m dl rt)
configure_package_config_file(cmake/hotpathConfig.cmake.in ${PROJECT_BINARY_DIR}/package/hotpathConfig.cmake
  INSTALL_DESTINATION ${HOTPATH_INSTALL_CMAKEDIR} PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor release may change the ABI (the SONAME carries the minor version too).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/hotpathConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/hotpathConfig.cmake ${PROJECT_BINARY_DIR}/package/hotpathConfigVersion.cmake
  DESTINATION ${HOTPATH_INSTALL_CMAKEDIR})

# hotpath.pc finds the prefix from its own place (${pcfiledir}), so an installed tree can be moved.
file(RELATIVE_PATH HOTPATH_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" HOTPATH_PC_TO_PREFIX "${HOTPATH_PC_TO_PREFIX}")
list(TRANSFORM HOTPATH_STATIC_LINK_LIBS PREPEND "-l" OUTPUT_VARIABLE HOTPATH_PC_PRIVATE_LIBS)
list(JOIN HOTPATH_PC_PRIVATE_LIBS " " HOTPATH_PC_PRIVATE_LIBS)
configure_file(cmake/hotpath.pc.in ${PROJECT_BINARY_DIR}/package/hotpath.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/hotpath.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
