# Installers: `cmake --build BUILD --target package` makes engram_<version>_amd64.deb (its
# Depends from dpkg-shlibdeps) and engram-<version>-linux-<arch>.tar.gz, both from the install()
# rules: bin/engram, bin/engram-cli, lib/<multiarch>/engram (the SentencePiece backend),
# share/engram/models/engram-tiny, the desktop entry, icons, AppStream metadata and man pages.
# The programs find the model and the backend relative to themselves, so the tarball runs where
# it is unpacked. tests/packaging.cmake checks both packages; tools/test-deb-install.sh installs
# the .deb on a clean Debian 12.
include(GNUInstallDirs)

set(ENGRAM_PACKAGING_DIR ${PROJECT_SOURCE_DIR}/packaging)
set(ENGRAM_PACKAGE_CONTACT
    "Engram maintainers <maintainers@users.noreply.a-seed-410ee66c.example>")
# Debian wants 0755 directories whatever the builder's umask.
set(CMAKE_INSTALL_DEFAULT_DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
    GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

# Man pages and the changelog are installed gzipped with -9n (no name or timestamp): Debian
# policy 12.3 and 12.7; lintian flags them otherwise.
find_program(ENGRAM_GZIP gzip REQUIRED)
set(ENGRAM_GZIPPED_DIR ${PROJECT_BINARY_DIR}/packaging)
set(ENGRAM_GZIPPED_FILES)
function(engram_install_gzipped source name destination)
  set(copy ${ENGRAM_GZIPPED_DIR}/${name})
  add_custom_command(OUTPUT ${copy}.gz
                     COMMAND ${CMAKE_COMMAND} -E copy ${source} ${copy}
                     COMMAND ${ENGRAM_GZIP} -9nf ${copy}
                     DEPENDS ${source} VERBATIM)
  set(ENGRAM_GZIPPED_FILES ${ENGRAM_GZIPPED_FILES} ${copy}.gz PARENT_SCOPE)
  install(FILES ${copy}.gz DESTINATION ${destination})
endfunction()

engram_install_gzipped(${ENGRAM_PACKAGING_DIR}/man/engram-cli.1 engram-cli.1
                       ${CMAKE_INSTALL_MANDIR}/man1)
if(TARGET engram)
  engram_install_gzipped(${ENGRAM_PACKAGING_DIR}/man/engram.1 engram.1 ${CMAKE_INSTALL_MANDIR}/man1)
endif()
# A native package (no Debian revision): the changelog is changelog.gz, not changelog.Debian.gz.
engram_install_gzipped(${ENGRAM_PACKAGING_DIR}/changelog changelog ${CMAKE_INSTALL_DOCDIR})
add_custom_target(engram_packaging_docs ALL DEPENDS ${ENGRAM_GZIPPED_FILES})
install(FILES ${ENGRAM_PACKAGING_DIR}/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_PACKAGE_NAME engram)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The Engram developers")
set(CPACK_PACKAGE_CONTACT ${ENGRAM_PACKAGE_CONTACT})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "desktop assistant whose memory is the model's KV cache")
# The long description: Debian wants lines of at most 80 characters.
set(CPACK_PACKAGE_DESCRIPTION
    "Engram chats with a local language model and keeps every conversation,
together with the attention cache the model computed for it, in the user's
profile: a conversation opened again continues without reading its history
again. It runs on the CPU with the bundled engram-tiny model and opens
Hugging Face model folders (safetensors).
.
This package contains the desktop app (engram), the command-line tool
(engram-cli) and the bundled model.")
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_STRIP_FILES ON)
set(CPACK_VERBATIM_VARIABLES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libtorch runs on whichever libblas.so.3 is chosen; the reference BLAS is ~10x slower
# (tools/install-deps.sh), so OpenBLAS comes along unless recommends are off.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "libopenblas0")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)

execute_process(COMMAND uname -m OUTPUT_VARIABLE ENGRAM_MACHINE OUTPUT_STRIP_TRAILING_WHITESPACE)
set(CPACK_PACKAGE_FILE_NAME engram-${PROJECT_VERSION}-linux-${ENGRAM_MACHINE})

include(CPack)
