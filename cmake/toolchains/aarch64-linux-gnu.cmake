# Cross build for 64-bit Arm Linux (Grace, Neoverse) with Debian's cross compilers
# (g++-aarch64-linux-gnu), run under qemu-user where the build machine is not Arm (docs/portability.md).
# The aarch64 preset uses it: cmake --preset aarch64. Tests run through CMAKE_CROSSCOMPILING_EMULATOR.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# The target's libraries and headers come from the cross tree only (never the build machine's x86 ones)...
set(HOTPATH_CROSS_ROOT /usr/aarch64-linux-gnu)
# ...except the header-only libraries (nlohmann-json, CLI11), which are the same on every architecture: a
# tree of links to just those, so that no other header of the build machine is ever seen.
set(_headers "${CMAKE_BINARY_DIR}/host-headers")
foreach(_link include/nlohmann include/CLI share/cmake/nlohmann_json share/cmake/CLI11)
  if(EXISTS "/usr/${_link}" AND NOT EXISTS "${_headers}/usr/${_link}")
    get_filename_component(_parent "${_headers}/usr/${_link}" DIRECTORY)
    file(MAKE_DIRECTORY "${_parent}")
    file(CREATE_LINK "/usr/${_link}" "${_headers}/usr/${_link}" SYMBOLIC)
  endif()
endforeach()
set(CMAKE_FIND_ROOT_PATH "${HOTPATH_CROSS_ROOT}" "${_headers}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Tests (and gtest_discover_tests) run the target's programs under qemu-user, whose default CPU (max)
# has every extension the CPU backend can use (FEAT_DotProd, FEAT_I8MM, FEAT_BF16, SVE2); QEMU_CPU picks
# another (scripts/test-aarch64.sh runs the tests again as a base Armv8.0 core, cortex-a57).
find_program(HOTPATH_QEMU_AARCH64 qemu-aarch64)
if(HOTPATH_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR "${HOTPATH_QEMU_AARCH64};-L;${HOTPATH_CROSS_ROOT}")
endif()
