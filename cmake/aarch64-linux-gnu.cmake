# aarch64-linux-gnu.cmake: CMake toolchain file for cross-compiling to 64-bit Arm Linux on Debian 12
# with Debian's cross gcc (gcc-aarch64-linux-gnu); the tests run under qemu-user-static. The C
# library is the cross one (/usr/aarch64-linux-gnu, libc6-dev-arm64-cross); other libraries are
# Debian's arm64 packages installed by multiarch (libcjson-dev:arm64: /usr/lib/aarch64-linux-gnu,
# headers in /usr/include). scripts/setup.sh --test installs all of it; scripts/test-aarch64.sh
# uses this file: cmake -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake ...
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(IFL_CROSS_TRIPLE aarch64-linux-gnu)

set(CMAKE_C_COMPILER /usr/bin/${IFL_CROSS_TRIPLE}-gcc)
set(CMAKE_AR /usr/bin/${IFL_CROSS_TRIPLE}-ar CACHE FILEPATH "")
set(CMAKE_RANLIB /usr/bin/${IFL_CROSS_TRIPLE}-ranlib CACHE FILEPATH "")
set(CMAKE_LIBRARY_ARCHITECTURE ${IFL_CROSS_TRIPLE})

# Libraries and headers: the cross C library's tree first, then the host's multiarch paths (which,
# with CMAKE_LIBRARY_ARCHITECTURE, are /usr/lib/aarch64-linux-gnu, not the x86-64 ones). Programs
# (pkg-config, valgrind, node, python3) are the build machine's.
set(CMAKE_FIND_ROOT_PATH /usr/${IFL_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config reads the arm64 .pc files only (libcjson.pc of libcjson-dev:arm64).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${IFL_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# ctest (and try_run) run the test binaries under qemu. -L /: the Arm dynamic loader and C library
# are Debian's libc6:arm64 (/lib/ld-linux-aarch64.so.1, /lib/aarch64-linux-gnu), installed with
# libcjson1:arm64, which depends on it. Not -L /usr/aarch64-linux-gnu: that loader
# (libc6-arm64-cross, glibc 2.36-8cross1) still finds libc6:arm64's libc.so.6 first (a newer build
# of 2.36) in the multiarch directory, and the mismatched pair hangs in the first pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR /usr/bin/qemu-aarch64-static -L /)
