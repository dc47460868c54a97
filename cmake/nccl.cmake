# Pick the NCCL to build and run with. Our communication runs on the NCCL device API (symmetric
# windows, LSA pointers and barriers), so a candidate is usable only when its nccl.h is at least
# DIST_MOE_NCCL_MIN_VERSION, the device-API headers (nccl_device.h) are there and libnccl.so* sits
# beside it. Candidates, in this order:
#   1. -DDIST_MOE_NCCL_ROOT=<dir>: when given, the only one taken (an unusable one is an error),
#   2. $NCCL_ROOT, $NCCL_HOME,
#   3. the nvidia-nccl wheel of every Python found (the one building the package, python3 on PATH,
#      /usr/bin/python3) and of any torch venv in the usual places (/opt/*/.venv, ~/.local, ...),
#   4. the CUDA toolkit,
#   5. the system (/usr, /usr/local).
# The newest usable one wins; a tie goes to the earlier one, so a torch wheel beats a toolkit copy of
# the same version (one NCCL per process when torch loads its own). A candidate whose own headers lack
# the device API borrows them from another candidate of exactly the same version.
# Results: DIST_MOE_NCCL_INCLUDE_DIR, DIST_MOE_NCCL_LIBRARY, DIST_MOE_NCCL_VERSION and the imported
# target dist_moe::nccl; the library's folder goes into every binary's RPATH (DT_RPATH, which also
# beats LD_LIBRARY_PATH), so an older NCCL elsewhere on the machine is not loaded instead.
set(DIST_MOE_NCCL_MIN_VERSION 2.28.0)  # ncclDevCommCreate, symmetric windows, LSA barriers

set(_dmoe_nccl_n 0)
set(_dmoe_nccl_seen "")

# Records one candidate: its header folder, the folders that may hold libnccl.so*, and where it came from.
function(_dmoe_nccl_add label include_dir)
  if(NOT EXISTS "${include_dir}/nccl.h")
    return()
  endif()
  set(lib "")
  foreach(dir ${ARGN})
    foreach(name libnccl.so.2 libnccl.so)
      if(NOT lib AND EXISTS "${dir}/${name}")
        set(lib "${dir}/${name}")
      endif()
    endforeach()
  endforeach()
  file(REAL_PATH "${include_dir}" real_include)
  set(key "${real_include}")
  if(lib)
    file(REAL_PATH "${lib}" real_lib)
    string(APPEND key "|${real_lib}")
  endif()
  if(key IN_LIST _dmoe_nccl_seen)  # the same NCCL reached twice (a symlinked toolkit, sys.path and a glob)
    return()
  endif()
  file(STRINGS "${include_dir}/nccl.h" defines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  set(version "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${part} +([0-9]+)" _ "${defines}")
    list(APPEND version "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN version "." version)
  math(EXPR i "${_dmoe_nccl_n}")
  set(_dmoe_nccl_${i}_label "${label}" PARENT_SCOPE)
  set(_dmoe_nccl_${i}_include "${include_dir}" PARENT_SCOPE)
  set(_dmoe_nccl_${i}_lib "${lib}" PARENT_SCOPE)
  set(_dmoe_nccl_${i}_version "${version}" PARENT_SCOPE)
  if(EXISTS "${include_dir}/nccl_device.h")
    set(_dmoe_nccl_${i}_device ON PARENT_SCOPE)
  else()
    set(_dmoe_nccl_${i}_device OFF PARENT_SCOPE)
  endif()
  math(EXPR n "${_dmoe_nccl_n} + 1")
  set(_dmoe_nccl_n ${n} PARENT_SCOPE)
  list(APPEND _dmoe_nccl_seen "${key}")
  set(_dmoe_nccl_seen "${_dmoe_nccl_seen}" PARENT_SCOPE)
endfunction()

macro(_dmoe_nccl_add_root label root)
  if(NOT "${root}" STREQUAL "")
    _dmoe_nccl_add("${label}" "${root}/include" "${root}/lib" "${root}/lib64")
  endif()
endmacro()

# 1-2. roots named by the user
if(DIST_MOE_NCCL_ROOT)
  _dmoe_nccl_add_root("DIST_MOE_NCCL_ROOT" "${DIST_MOE_NCCL_ROOT}")
  if(_dmoe_nccl_n EQUAL 0)
    message(FATAL_ERROR " DIST_MOE_NCCL_ROOT=${DIST_MOE_NCCL_ROOT} holds no include/nccl.h: point it at a folder with "
                        "include/nccl.h, include/nccl_device.h and lib/libnccl.so.2 (NCCL ${DIST_MOE_NCCL_MIN_VERSION}+)")
  endif()
endif()
_dmoe_nccl_add_root("NCCL_ROOT" "$ENV{NCCL_ROOT}")
_dmoe_nccl_add_root("NCCL_HOME" "$ENV{NCCL_HOME}")

# 3. nvidia-nccl wheels: the site-packages of each interpreter, then the usual venv places.
set(_dmoe_site_dirs "")
set(_dmoe_pythons "")
if(Python_EXECUTABLE)
  list(APPEND _dmoe_pythons "${Python_EXECUTABLE}")
endif()
find_program(_dmoe_python3 python3)
foreach(_py "${_dmoe_python3}" /usr/bin/python3)
  if(_py AND EXISTS "${_py}")
    list(APPEND _dmoe_pythons "${_py}")
  endif()
endforeach()
list(REMOVE_DUPLICATES _dmoe_pythons)
foreach(_py ${_dmoe_pythons})
  execute_process(COMMAND "${_py}" -c "import site, sys; print(';'.join(sys.path[1:] + site.getsitepackages()))"
                  WORKING_DIRECTORY "${CMAKE_BINARY_DIR}" OUTPUT_VARIABLE _dirs OUTPUT_STRIP_TRAILING_WHITESPACE
                  ERROR_QUIET RESULT_VARIABLE _rc TIMEOUT 60)
  if(_rc EQUAL 0)
    list(APPEND _dmoe_site_dirs ${_dirs})
  endif()
endforeach()
foreach(_pattern /opt/*/.venv/lib/python3*/site-packages /opt/*/lib/python3*/site-packages
                 /opt/*/*/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages
                 /usr/local/lib/python3*/site-packages /usr/lib/python3/dist-packages
                 "$ENV{HOME}/.local/lib/python3*/site-packages" "$ENV{VIRTUAL_ENV}/lib/python3*/site-packages"
                 "$ENV{CONDA_PREFIX}/lib/python3*/site-packages")
  file(GLOB _found LIST_DIRECTORIES true "${_pattern}")
  list(APPEND _dmoe_site_dirs ${_found})
endforeach()
foreach(_dir ${_dmoe_site_dirs})
  if(IS_DIRECTORY "${_dir}/nvidia/nccl")
    _dmoe_nccl_add_root("nvidia-nccl wheel" "${_dir}/nvidia/nccl")
  endif()
endforeach()

# 4. the CUDA toolkit
foreach(_inc ${CUDAToolkit_INCLUDE_DIRS})
  _dmoe_nccl_add("CUDA toolkit" "${_inc}" "${CUDAToolkit_LIBRARY_DIR}")
endforeach()

# 5. the system
_dmoe_nccl_add("system" /usr/include /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE} /usr/lib64 /usr/lib)
_dmoe_nccl_add("system" /usr/local/include /usr/local/lib /usr/local/lib64)

# Judge every candidate; keep the newest usable one. (Errors start with a space: CMake prints such a
# message as it is, on one line, instead of re-wrapping it.)
set(_dmoe_best "")
set(_dmoe_found "")
set(_dmoe_usable 0)
math(EXPR _last "${_dmoe_nccl_n} - 1")
set(_dmoe_indices "")
if(_dmoe_nccl_n GREATER 0)
  foreach(i RANGE ${_last})
    list(APPEND _dmoe_indices ${i})
  endforeach()
endif()
foreach(i ${_dmoe_indices})
  set(_v "${_dmoe_nccl_${i}_version}")
  set(_where "${_dmoe_nccl_${i}_include}")
  if(_dmoe_nccl_${i}_lib)
    set(_where "${_dmoe_nccl_${i}_lib}")
  endif()
  set(_headers "${_dmoe_nccl_${i}_include}")
  set(_why "")
  if(NOT _dmoe_nccl_${i}_lib)
    set(_why "no libnccl.so* beside it")
  elseif(_v VERSION_LESS DIST_MOE_NCCL_MIN_VERSION)
    set(_why "older than ${DIST_MOE_NCCL_MIN_VERSION}")
  elseif(NOT _dmoe_nccl_${i}_device)
    set(_why "no device API (nccl_device.h)")
    foreach(j ${_dmoe_indices})  # headers of the very same version elsewhere serve as well
      if(_dmoe_nccl_${j}_device AND _dmoe_nccl_${j}_version VERSION_EQUAL _v)
        set(_headers "${_dmoe_nccl_${j}_include}")
        set(_why "")
        break()
      endif()
    endforeach()
  endif()
  set(_dmoe_nccl_${i}_headers "${_headers}")
  if(_why)
    message(STATUS "NCCL candidate ${_v} at ${_where} (${_dmoe_nccl_${i}_label}): unusable, ${_why}")
    list(APPEND _dmoe_found "${_v} at ${_where} (${_dmoe_nccl_${i}_label}: ${_why})")
    continue()
  endif()
  if(NOT _headers STREQUAL _dmoe_nccl_${i}_include)
    message(STATUS "NCCL candidate ${_v} at ${_where} (${_dmoe_nccl_${i}_label}): usable, device-API headers from ${_headers}")
  else()
    message(STATUS "NCCL candidate ${_v} at ${_where} (${_dmoe_nccl_${i}_label}): usable")
  endif()
  math(EXPR _dmoe_usable "${_dmoe_usable} + 1")
  if(_dmoe_best STREQUAL "" OR _v VERSION_GREATER _dmoe_nccl_${_dmoe_best}_version)
    if(NOT DIST_MOE_NCCL_ROOT OR _dmoe_best STREQUAL "")
      set(_dmoe_best ${i})
    endif()
  endif()
endforeach()

# With DIST_MOE_NCCL_ROOT, only its candidate (number 0) may be taken.
if(DIST_MOE_NCCL_ROOT AND NOT _dmoe_best STREQUAL "0")
  list(GET _dmoe_found 0 _first)
  message(FATAL_ERROR " NCCL at DIST_MOE_NCCL_ROOT is unusable: found ${_first}; need ${DIST_MOE_NCCL_MIN_VERSION}+ "
                      "with include/nccl_device.h and lib/libnccl.so.2")
endif()
if(_dmoe_best STREQUAL "")
  if(_dmoe_found)
    list(JOIN _dmoe_found "; " _dmoe_found)
  else()
    set(_dmoe_found "none")
  endif()
  message(FATAL_ERROR " no usable NCCL: need ${DIST_MOE_NCCL_MIN_VERSION}+ with the device API (include/nccl_device.h) "
                      "and lib/libnccl.so*; found: ${_dmoe_found}. Install one (e.g. pip install nvidia-nccl-cu13) "
                      "or pass -DDIST_MOE_NCCL_ROOT=<its folder>")
endif()

set(DIST_MOE_NCCL_INCLUDE_DIR "${_dmoe_nccl_${_dmoe_best}_headers}" CACHE INTERNAL "NCCL headers in use" FORCE)
set(DIST_MOE_NCCL_LIBRARY "${_dmoe_nccl_${_dmoe_best}_lib}" CACHE INTERNAL "NCCL library in use" FORCE)
set(DIST_MOE_NCCL_VERSION "${_dmoe_nccl_${_dmoe_best}_version}" CACHE INTERNAL "NCCL version in use" FORCE)
if(DIST_MOE_NCCL_ROOT)
  set(_why "set by DIST_MOE_NCCL_ROOT")
else()
  set(_why "the newest of ${_dmoe_usable} usable candidate(s) (${DIST_MOE_NCCL_MIN_VERSION}+ with the device API)")
endif()
message(STATUS "NCCL: ${DIST_MOE_NCCL_VERSION} at ${DIST_MOE_NCCL_LIBRARY} (${_dmoe_nccl_${_dmoe_best}_label}): ${_why}")

# A full-path link: the wheel ships lib/libnccl.so.2 without a plain libnccl.so.
add_library(dist_moe::nccl SHARED IMPORTED)
set_target_properties(dist_moe::nccl PROPERTIES IMPORTED_LOCATION "${DIST_MOE_NCCL_LIBRARY}"
                      INTERFACE_INCLUDE_DIRECTORIES "${DIST_MOE_NCCL_INCLUDE_DIR}")
# Its folder in every binary's run path, even when it is an implicit link directory; DT_RPATH rather
# than DT_RUNPATH, so LD_LIBRARY_PATH (often naming the toolkit's or an older NCCL) cannot override it.
get_filename_component(_dmoe_nccl_libdir "${DIST_MOE_NCCL_LIBRARY}" DIRECTORY)
list(APPEND CMAKE_BUILD_RPATH "${_dmoe_nccl_libdir}")
set_property(TARGET dist_moe::nccl APPEND PROPERTY INTERFACE_LINK_OPTIONS "LINKER:--disable-new-dtags")
