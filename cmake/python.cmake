# The Python extension kiln._kiln: C against CPython's limited API (Py_LIMITED_API 3.9), so one
# build (an abi3 wheel, tag cp39-abi3) serves CPython 3.9 and later. It links the static library
# into the module, so the package is one self-contained .so with nothing to relocate.
#
# KILN_PYTHON: AUTO (default) builds it when Python's headers are found (not in the sanitizer and
# fuzz builds), ON requires them, OFF leaves it out. Built into <build>/python/kiln together with
# the package's .py files, so `PYTHONPATH=<build>/python python -c "import kiln"` works from the
# build tree; `pip install .` (scikit-build-core, pyproject.toml) installs the component "python".
set(KILN_PYTHON AUTO CACHE STRING "Build the Python extension: AUTO, ON or OFF")
set_property(CACHE KILN_PYTHON PROPERTY STRINGS AUTO ON OFF)
set(kiln_python_wanted ${KILN_PYTHON})
if(SKBUILD)
  set(kiln_python_wanted ON)
elseif(kiln_python_wanted STREQUAL "AUTO" AND (KILN_SANITIZE OR KILN_FUZZ))
  set(kiln_python_wanted OFF)
endif()
set(KILN_HAVE_PYTHON OFF)
if(NOT kiln_python_wanted STREQUAL "OFF")
  if(kiln_python_wanted STREQUAL "ON")
    find_package(Python3 3.9 REQUIRED COMPONENTS Interpreter Development.Module)
  else()
    find_package(Python3 3.9 QUIET COMPONENTS Interpreter Development.Module)
  endif()
  if(Python3_Development.Module_FOUND)
    set(KILN_HAVE_PYTHON ON)
  endif()
endif()
message(STATUS "kiln: Python extension ${KILN_HAVE_PYTHON}")

if(KILN_HAVE_PYTHON)
  set(kiln_py_dir ${PROJECT_BINARY_DIR}/python/kiln)
  add_library(kiln_python MODULE ${PROJECT_SOURCE_DIR}/python/src/_kiln.c)
  set_target_properties(kiln_python PROPERTIES OUTPUT_NAME _kiln PREFIX "" SUFFIX ".abi3.so"
                        LIBRARY_OUTPUT_DIRECTORY ${kiln_py_dir} C_VISIBILITY_PRESET hidden)
  target_include_directories(kiln_python PRIVATE ${Python3_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/src)
  target_compile_definitions(kiln_python PRIVATE Py_LIMITED_API=0x03090000)
  # kiln_run_options (RunOptions' terminate and deadline) where the header has them
  file(STRINGS ${PROJECT_SOURCE_DIR}/include/kiln.h kiln_has_run_options REGEX "kiln_run_options_create")
  if(kiln_has_run_options)
    target_compile_definitions(kiln_python PRIVATE KILN_PY_RUN_OPTIONS=1)
  endif()
  # a library that runs concurrent calls of one session itself (else the module serialises them)
  file(STRINGS ${PROJECT_SOURCE_DIR}/include/kiln.h kiln_has_concurrent_runs REGEX "kiln_session_options_set_max_concurrent_runs")
  if(kiln_has_concurrent_runs)
    target_compile_definitions(kiln_python PRIVATE KILN_PY_CONCURRENT_RUNS=1)
  endif()
  if(KILN_HAVE_CUDA)
    target_compile_definitions(kiln_python PRIVATE KILN_HAVE_CUDA=1)
  endif()
  target_compile_options(kiln_python PRIVATE ${KILN_WARNINGS})
  # the library's symbols stay inside the module (no clash with a libkiln.so in the same process)
  target_link_libraries(kiln_python PRIVATE kiln_static)
  target_link_options(kiln_python PRIVATE -Wl,--exclude-libs,ALL)
  # the package's Python files next to the module, so the build tree is importable
  file(GLOB kiln_py_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/python/kiln/*.py)
  foreach(f ${kiln_py_files})
    get_filename_component(n ${f} NAME)
    configure_file(${f} ${kiln_py_dir}/${n} COPYONLY)
  endforeach()
  install(TARGETS kiln_python LIBRARY DESTINATION kiln COMPONENT python)
  install(FILES ${kiln_py_files} DESTINATION kiln COMPONENT python)
endif()
