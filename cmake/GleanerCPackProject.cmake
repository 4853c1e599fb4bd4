# Read by cpack (CPACK_PROJECT_CONFIG_FILE of cmake/GleanerPackaging.cmake) before it installs the components:
# the Debian version, what depends on it, and the changelog that carries it. `cpack -D GLEANER_DEB_VERSION=V`
# (installers/build-debs.sh --version V) packages the same build as another version.

if(NOT CPACK_GENERATOR STREQUAL "DEB")
  return()
endif()
if(NOT CPACK_GLEANER_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "The Debian packages install into /usr, but ${CPACK_GLEANER_BINARY_DIR} was configured with "
                      "CMAKE_INSTALL_PREFIX=${CPACK_GLEANER_INSTALL_PREFIX} (its /etc paths would be wrong). Run "
                      "installers/build-debs.sh --build-dir ${CPACK_GLEANER_BINARY_DIR}, or reconfigure with "
                      "-DCMAKE_INSTALL_PREFIX=/usr (nothing is recompiled).")
endif()

if(NOT GLEANER_DEB_VERSION)
  set(GLEANER_DEB_VERSION "${CPACK_PACKAGE_VERSION}-${CPACK_GLEANER_DEB_REVISION}")
endif()
# UPSTREAM-REVISION, as Debian writes a version without an epoch: the upstream part starts with a digit.
if(NOT GLEANER_DEB_VERSION MATCHES "^([0-9][A-Za-z0-9.+~]*)-([A-Za-z0-9.+~]+)$")
  message(FATAL_ERROR "GLEANER_DEB_VERSION=\"${GLEANER_DEB_VERSION}\" is not a Debian version UPSTREAM-REVISION "
                      "such as ${CPACK_PACKAGE_VERSION}-2 (digits first; letters, digits and . + ~ only).")
endif()
set(CPACK_DEBIAN_PACKAGE_VERSION "${CMAKE_MATCH_1}")
set(CPACK_DEBIAN_PACKAGE_RELEASE "${CMAKE_MATCH_2}")
# The tray app talks to the agent's control socket of the same release, and cannot show a window without a Qt
# platform plugin (libqt6gui6 only recommends them).
set(CPACK_DEBIAN_DESKTOP_PACKAGE_DEPENDS "gleaner-agent (= ${GLEANER_DEB_VERSION}), qt6-qpa-plugins")

# /usr/share/doc/PACKAGE/changelog.Debian.gz for this version. SOURCE_DATE_EPOCH, when set, fixes its date (and
# gzip -n leaves the time out of the file), so a rebuild gives the same bytes.
set(out "${CPACK_GLEANER_BINARY_DIR}/debian")
file(MAKE_DIRECTORY "${out}")
string(TIMESTAMP GLEANER_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
set(GLEANER_DEB_MAINTAINER "${CPACK_GLEANER_DEB_MAINTAINER}")
configure_file("${CPACK_GLEANER_SOURCE_DIR}/installers/debian/changelog.in" "${out}/changelog.Debian" @ONLY)
execute_process(COMMAND gzip -9nf "${out}/changelog.Debian" RESULT_VARIABLE gzipped)
if(NOT gzipped EQUAL 0)
  message(FATAL_ERROR "gzip could not compress ${out}/changelog.Debian (gzip is in every Debian system: is it on PATH?)")
endif()
