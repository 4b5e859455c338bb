# Python wheel layout, used when scikit-build-core drives the build (pyproject.toml sets
# SKBUILD): the shared library goes inside the kvcache package as libkvcache.so, where
# python/kvcache/_ffi.py looks first. Component "python" is the only one the wheel build
# installs, so the headers and the CMake/pkg-config files stay out of site-packages.
if(NOT TARGET kvcache)
  message(FATAL_ERROR "the Python package needs the shared library (KVC_BUILD_SHARED=ON)")
endif()
install(FILES $<TARGET_FILE:kvcache> DESTINATION kvcache RENAME libkvcache.so COMPONENT python)
