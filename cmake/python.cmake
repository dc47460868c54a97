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

pybind11_add_module(dist_moe_native MODULE ${PROJECT_SOURCE_DIR}/python/dist_moe/csrc/core_bindings.cpp)
target_link_libraries(dist_moe_native PRIVATE dist_moe_core)
# Built in place so `PYTHONPATH=python` imports it (the file is git-ignored).
set_target_properties(dist_moe_native PROPERTIES OUTPUT_NAME _native
                      LIBRARY_OUTPUT_DIRECTORY ${PROJECT_SOURCE_DIR}/python/dist_moe)
set(DIST_MOE_PYTHON_READY ON)
