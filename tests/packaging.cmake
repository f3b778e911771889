# The installers (issue 20, cmake/Packaging.cmake): cpack makes the .deb and the tarball with the
# install layout, lintian passes the .deb, the desktop files validate. Installing the .deb on a
# clean Debian 12 is tools/test-deb-install.sh (needs root and the network: not a CI test).
find_program(ENGRAM_LINTIAN lintian)
find_program(ENGRAM_DESKTOP_FILE_VALIDATE desktop-file-validate)
find_program(ENGRAM_APPSTREAMCLI appstreamcli)
find_program(ENGRAM_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(NOT ENGRAM_LINTIAN OR NOT ENGRAM_DESKTOP_FILE_VALIDATE OR NOT ENGRAM_APPSTREAMCLI
   OR NOT ENGRAM_DPKG_SHLIBDEPS)
  message(WARNING "lintian, desktop-file-validate, appstreamcli or dpkg-shlibdeps missing "
                  "(tools/install-deps.sh): the packaging tests are not run")
  return()
endif()

set(ENGRAM_PACKAGE_TEST_DIR ${PROJECT_BINARY_DIR}/packaging-test)
set(ENGRAM_PACKAGE_HAS_GUI 0)
if(TARGET engram)
  set(ENGRAM_PACKAGE_HAS_GUI 1)
endif()
add_test(NAME test_packages
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/packaging/check_packages.sh ${PROJECT_BINARY_DIR}
                 ${ENGRAM_PACKAGE_TEST_DIR} ${PROJECT_VERSION} ${ENGRAM_PACKAGE_HAS_GUI})
set_tests_properties(test_packages PROPERTIES TIMEOUT 600 FIXTURES_SETUP engram_packages
                                              RUN_SERIAL ON)
execute_process(COMMAND dpkg --print-architecture OUTPUT_VARIABLE ENGRAM_DEB_ARCH
                OUTPUT_STRIP_TRAILING_WHITESPACE)
add_test(NAME test_package_lintian
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/packaging/check_lintian.sh
                 ${ENGRAM_PACKAGE_TEST_DIR}/engram_${PROJECT_VERSION}_${ENGRAM_DEB_ARCH}.deb)
set_tests_properties(test_package_lintian PROPERTIES TIMEOUT 300
                                                     FIXTURES_REQUIRED engram_packages)
add_test(NAME test_desktop_metadata
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/packaging/check_desktop_metadata.sh
                 ${PROJECT_SOURCE_DIR}/packaging)
set_tests_properties(test_desktop_metadata PROPERTIES TIMEOUT 60)
