# Helpers that keep the top-level CMakeLists short: every folder's sources are globbed, so adding a
# file to src/<layer>/ needs no CMake edit.

function(dist_moe_host_library name dir)
  file(GLOB _srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cpp)
  if(NOT _srcs)  # keep the target valid while a layer is still empty
    set(_srcs ${CMAKE_CURRENT_BINARY_DIR}/${name}_empty.cpp)
    file(WRITE ${_srcs} "// empty\n")
  endif()
  add_library(${name} STATIC ${_srcs})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${name} PRIVATE ${DIST_MOE_HOST_WARNINGS})
endfunction()

# CUDA flags shared by every .cu target: the sm_90a gencode, relaxed constexpr for host/device
# helpers, line info for profilers, and a resource report kept quiet unless asked for.
function(dist_moe_cuda_flags target)
  separate_arguments(_gencode UNIX_COMMAND "${DIST_MOE_CUDA_GENCODE}")
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:${_gencode} --expt-relaxed-constexpr -lineinfo -Xcompiler=-Wall>)
  if(DIST_MOE_PTXAS_VERBOSE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  endif()
  set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
endfunction()

function(dist_moe_cuda_library name)
  set(_srcs)
  foreach(dir ${ARGN})
    file(GLOB _d CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cu ${CMAKE_CURRENT_SOURCE_DIR}/${dir}/*.cpp)
    list(APPEND _srcs ${_d})
  endforeach()
  if(NOT _srcs)
    # Keep the target valid while a layer is still empty.
    set(_srcs ${CMAKE_CURRENT_SOURCE_DIR}/src/core/empty_translation_unit.cu)
  endif()
  add_library(${name} STATIC ${_srcs})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  dist_moe_cuda_flags(${name})
endfunction()
