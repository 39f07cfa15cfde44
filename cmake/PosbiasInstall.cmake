# Installs the client library, its generated API headers and a CMake package, so that other projects
# can `find_package(posbias CONFIG REQUIRED)` and link `posbias::client`.
include(CMakePackageConfigHelpers)

install(TARGETS posbias_client posbias_proto EXPORT posbiasTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/client/include/posbias/client.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/posbias)
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/gen/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/proto/posbias DESTINATION ${CMAKE_INSTALL_DATADIR}/posbias/proto
  FILES_MATCHING PATTERN "*.proto")
install(EXPORT posbiasTargets NAMESPACE posbias:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/posbias)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/posbiasConfig.cmake.in
  ${PROJECT_BINARY_DIR}/posbiasConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/posbias)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/posbiasConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/posbiasConfig.cmake ${PROJECT_BINARY_DIR}/posbiasConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/posbias)
