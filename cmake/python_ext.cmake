# Optional CPython extension python/kvcache/_kvcfast.c (-DKVC_BUILD_PYTHON_EXT=ON): the
# binding's per-step calls without ctypes' argument conversion. It does not link to
# libkvcache (the package binds the library's function addresses at import), is built
# for the Python that CMake finds (Python3_EXECUTABLE to choose), lands next to
# libkvcache.so in the build directory, where python/kvcache/_ffi.py looks for it, and is
# installed into the package by a wheel build that enables it.
find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
Python3_add_library(kvc_pyext MODULE WITH_SOABI ${PROJECT_SOURCE_DIR}/python/kvcache/_kvcfast.c)
set_target_properties(kvc_pyext PROPERTIES OUTPUT_NAME _kvcfast
                      LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}
                      C_VISIBILITY_PRESET hidden)
target_compile_options(kvc_pyext PRIVATE ${KVC_WARNINGS})
if(SKBUILD)
  install(TARGETS kvc_pyext LIBRARY DESTINATION kvcache COMPONENT python)
endif()
