# Locate NCCL (2.28+, with the device API headers nccl_device/). Search order:
#   1. -DDIST_MOE_NCCL_ROOT=<dir> (on the GPU machine: the torch venv's nvidia/nccl, so the
#      library torch loads and ours are the same one),
#   2. $NCCL_ROOT / $NCCL_HOME,
#   3. the CUDA toolkit directory.
set(_nccl_hints ${DIST_MOE_NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT})
# The device API header decides the include directory (a wheel may ship nccl.h alone).
find_path(DIST_MOE_NCCL_INCLUDE_DIR nccl_device.h HINTS ${_nccl_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_path(DIST_MOE_NCCL_INCLUDE_DIR nccl_device.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(DIST_MOE_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64 NO_DEFAULT_PATH)
find_library(DIST_MOE_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
if(NOT DIST_MOE_NCCL_INCLUDE_DIR OR NOT DIST_MOE_NCCL_LIBRARY)
  message(FATAL_ERROR "NCCL 2.28+ with the device API not found (include: ${DIST_MOE_NCCL_INCLUDE_DIR}, "
                      "library: ${DIST_MOE_NCCL_LIBRARY}): set -DDIST_MOE_NCCL_ROOT=<dir with include/nccl_device.h "
                      "and lib/libnccl.so*>")
endif()
file(STRINGS ${DIST_MOE_NCCL_INCLUDE_DIR}/nccl.h _nccl_ver REGEX "#define NCCL_(MAJOR|MINOR|PATCH) ")
message(STATUS "NCCL: ${DIST_MOE_NCCL_LIBRARY} (${_nccl_ver})")
add_library(dist_moe::nccl INTERFACE IMPORTED)
target_include_directories(dist_moe::nccl INTERFACE ${DIST_MOE_NCCL_INCLUDE_DIR})
target_link_libraries(dist_moe::nccl INTERFACE ${DIST_MOE_NCCL_LIBRARY})
