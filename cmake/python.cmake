# The dist_moe._native extension (torch-free C++ core for Python) and its pytest suite.
# Picks an interpreter that has pytest (Debian's python3 on CI machines, the torch venv's on the
# GPU machine) unless -DPython_EXECUTABLE is given.
if(NOT Python_EXECUTABLE)
  foreach(_py /usr/bin/python3 python3)
    execute_process(COMMAND ${_py} -c "import pytest" RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(_rc EQUAL 0)
      set(Python_EXECUTABLE ${_py})
      break()
    endif()
  endforeach()
endif()
find_package(Python 3.10 COMPONENTS Interpreter Development.Module)
if(NOT Python_FOUND)
  message(STATUS "dist_moe Python extension: skipped (no Python development files)")
  return()
endif()
execute_process(COMMAND ${Python_EXECUTABLE} -m pybind11 --cmakedir OUTPUT_VARIABLE _pybind11_dir
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
set(PYBIND11_FINDPYTHON ON)
find_package(pybind11 CONFIG HINTS ${_pybind11_dir})
if(NOT pybind11_FOUND)
  message(STATUS "dist_moe Python extension: skipped (pybind11 not found)")
  return()
endif()
message(STATUS "dist_moe Python extension: ${Python_EXECUTABLE}, pybind11 ${pybind11_VERSION}")

# Modules are built in place so `PYTHONPATH=python` imports them (the files are git-ignored); the
# pip build backend (build_backend/) points this at a staging folder instead.
set(DIST_MOE_PYTHON_OUTPUT_DIR "${PROJECT_SOURCE_DIR}/python/dist_moe" CACHE PATH "Where _native and _C are written")

# The modules must use the process's shared libstdc++: torch and numpy load it, and a second, static
# copy inside our module (a compiler wrapper that adds -static-libstdc++ does that) breaks C++
# exception handling once they are loaded together (seen as a segfault on the first error raised).
# Naming the shared library before the implicit libraries makes the linker resolve against it.
execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so OUTPUT_VARIABLE _dmoe_libstdcxx
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
function(dist_moe_python_module target)
  if(_dmoe_libstdcxx AND IS_ABSOLUTE "${_dmoe_libstdcxx}" AND EXISTS "${_dmoe_libstdcxx}")
    target_link_libraries(${target} PRIVATE ${_dmoe_libstdcxx})
  endif()
  # Whatever static archives still contribute stays private to the module.
  target_link_options(${target} PRIVATE -Wl,--exclude-libs,ALL)
endfunction()

pybind11_add_module(dist_moe_native MODULE ${PROJECT_SOURCE_DIR}/python/dist_moe/csrc/core_bindings.cpp)
target_link_libraries(dist_moe_native PRIVATE dist_moe_core)
dist_moe_python_module(dist_moe_native)
set_target_properties(dist_moe_native PROPERTIES OUTPUT_NAME _native LIBRARY_OUTPUT_DIRECTORY ${DIST_MOE_PYTHON_OUTPUT_DIR})
set(DIST_MOE_PYTHON_READY ON)

# dist_moe._C: the GPU runtime (contexts, the BF16 pipeline) for the torch ops in dist_moe/_ops.py.
# It takes raw device pointers and CUDA streams, so it builds without torch headers; it is loaded
# only when a context is created, so `import dist_moe` still works without CUDA or NCCL.
if(DIST_MOE_ENABLE_CUDA)
  pybind11_add_module(dist_moe_torch MODULE ${PROJECT_SOURCE_DIR}/python/dist_moe/csrc/gpu_bindings.cpp)
  target_link_libraries(dist_moe_torch PRIVATE dist_moe_runtime dist_moe_platform dist_moe_src_headers)
  dist_moe_python_module(dist_moe_torch)
  # libnccl.so.2 resolves to the copy torch has already loaded (same soname), else through the
  # build RPATH to the directory it was linked from.
  set_target_properties(dist_moe_torch PROPERTIES OUTPUT_NAME _C LIBRARY_OUTPUT_DIRECTORY ${DIST_MOE_PYTHON_OUTPUT_DIR})
endif()
