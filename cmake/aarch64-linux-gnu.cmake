# Cross build for aarch64 Linux from an x86-64 Debian 12 (scripts/test-arm64.sh): Debian's cross
# compiler (g++-aarch64-linux-gnu) and the arm64 -dev packages installed through multiarch
# (dpkg --add-architecture arm64), so headers are /usr/include's and libraries
# /usr/lib/aarch64-linux-gnu's. ctest runs the test binaries under qemu-user. One arm64 runtime:
# qemu is not given -L, so the binaries load the multiarch glibc and libstdc++ (/lib/aarch64-linux-gnu)
# that the -dev packages' libraries were built against, never the cross toolchain's own copies.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
find_program(MIMI_QEMU_AARCH64 qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR "${MIMI_QEMU_AARCH64}")
