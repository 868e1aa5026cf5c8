# Cross build for 64-bit ARM Linux with Debian's cross compiler (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross):
#   cmake -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The tests then run under qemu-user with the cross toolchain's sysroot: this file sets
# ATTN_TEST_EMULATOR (tests/CMakeLists.txt) and CMAKE_CROSSCOMPILING_EMULATOR to
# "qemu-aarch64 -L /usr/aarch64-linux-gnu" unless the cache already names one.
# ATTN_AARCH64_PREFIX (environment or -D) picks another compiler prefix or version, e.g.
# aarch64-linux-gnu- with ATTN_AARCH64_SUFFIX=-13 for aarch64-linux-gnu-gcc-13.
# ATTN_AARCH64_CLANG=ON (environment or -D) compiles with clang --target=aarch64-linux-gnu
# instead, over the same sysroot and GCC runtime: the NEON code as Apple's compiler (clang)
# sees it, run under the same qemu.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT ATTN_AARCH64_PREFIX)
  if(DEFINED ENV{ATTN_AARCH64_PREFIX})
    set(ATTN_AARCH64_PREFIX "$ENV{ATTN_AARCH64_PREFIX}")
  else()
    set(ATTN_AARCH64_PREFIX aarch64-linux-gnu-)
  endif()
endif()
if(NOT ATTN_AARCH64_SUFFIX AND DEFINED ENV{ATTN_AARCH64_SUFFIX})
  set(ATTN_AARCH64_SUFFIX "$ENV{ATTN_AARCH64_SUFFIX}")
endif()
if(NOT DEFINED ATTN_AARCH64_CLANG AND DEFINED ENV{ATTN_AARCH64_CLANG})
  set(ATTN_AARCH64_CLANG "$ENV{ATTN_AARCH64_CLANG}")
endif()
if(ATTN_AARCH64_CLANG)
  set(CMAKE_C_COMPILER clang)
  set(CMAKE_C_COMPILER_TARGET aarch64-linux-gnu)
else()
  set(CMAKE_C_COMPILER ${ATTN_AARCH64_PREFIX}gcc${ATTN_AARCH64_SUFFIX})
endif()

set(ATTN_AARCH64_SYSROOT /usr/aarch64-linux-gnu CACHE PATH
    "The target's libraries, for qemu-aarch64 -L")
set(CMAKE_FIND_ROOT_PATH ${ATTN_AARCH64_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# BOTH: a package installed under another prefix (tests/install/check.sh) is found too
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

set(CMAKE_CROSSCOMPILING_EMULATOR "qemu-aarch64;-L;${ATTN_AARCH64_SYSROOT}" CACHE STRING
    "Runs the target's programs on this machine")
set(ATTN_TEST_EMULATOR "${CMAKE_CROSSCOMPILING_EMULATOR}" CACHE STRING
    "Command (a ;-list) that runs the C test programs")

# pkg-config: the target's .pc files only (Debian multiarch: /usr/lib/aarch64-linux-gnu), never
# the build machine's, whose libraries (libmicrohttpd) would not link
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:${ATTN_AARCH64_SYSROOT}/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "")
