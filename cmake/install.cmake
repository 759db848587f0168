# Installing kiln for C users: the libraries, the header, the command, a relocatable pkg-config
# file and a CMake package (find_package(kiln) gives kiln::kiln, the shared library, and
# kiln::kiln_static). Included at the end of CMakeLists.txt; everything here is in the install
# component "c" so a Python wheel (component "python", cmake/python.cmake) takes none of it.

include(CMakePackageConfigHelpers)

install(TARGETS kiln kiln_static EXPORT kilnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT c
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT c
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT c)
install(FILES include/kiln.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT c)

# kiln.pc: the prefix is computed from where the file lies (${pcfiledir}), so a prefix that is
# moved or copied elsewhere keeps working. Libs.private lists what the static library needs.
file(RELATIVE_PATH kiln_pc_to_prefix "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(REGEX REPLACE "/$" "" kiln_pc_to_prefix "${kiln_pc_to_prefix}")
set(KILN_PC_PREFIX "\${pcfiledir}/${kiln_pc_to_prefix}")
set(KILN_PC_REQUIRES_PRIVATE "")
foreach(codec IN LISTS KILN_CODECS_FOUND) # NAME:module
  string(REGEX REPLACE "^[^:]*:" "" codec_module "${codec}")
  list(APPEND KILN_PC_REQUIRES_PRIVATE ${codec_module})
endforeach()
string(REPLACE ";" " " KILN_PC_REQUIRES_PRIVATE "${KILN_PC_REQUIRES_PRIVATE}")
set(KILN_PC_LIBS_PRIVATE "")
if(KILN_HAVE_CUDA)
  # CUDA's static runtime is linked into libkiln; cuBLASLt and cuDNN are loaded at run time
  set(KILN_PC_LIBS_PRIVATE "-L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -lrt -lstdc++ ")
endif()
string(APPEND KILN_PC_LIBS_PRIVATE "-ldl -lpthread -lm")
configure_file(kiln.pc.in ${PROJECT_BINARY_DIR}/kiln.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/kiln.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT c)

# the CMake package
set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR} COMPONENT c)
configure_package_config_file(cmake/kilnConfig.cmake.in ${PROJECT_BINARY_DIR}/kilnConfig.cmake
                              INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
        DESTINATION ${KILN_CMAKE_DIR} COMPONENT c)
