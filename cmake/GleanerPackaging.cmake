# Install rules for what installers/ holds (systemd units, maintainer scripts, the example policy, the sample jobs)
# and CPack's DEB generator: one Debian package per install component (docs/packages.md).
#
#   agent        gleaner-agent        gleaner-agent, gleaner-worker (libexec), the system and user units, /etc/gleaner,
#                                     the session helper's autostart entry
#   desktop      gleaner-desktop      the tray app, its .desktop and autostart entries and icons
#   coordinator  gleaner-coordinator  gleaner-coordinator, its unit, the sample jobs
#
# The components come from where the targets live: the top-level CMakeLists.txt sets
# CMAKE_INSTALL_DEFAULT_COMPONENT_NAME around add_subdirectory(agent|gui|coordinator), so an install() rule added
# there lands in the right package without naming it.
#
# installers/build-debs.sh is the one command (it configures with CMAKE_INSTALL_PREFIX=/usr, builds what the
# packages hold and runs cpack and lintian). By hand, from a build configured with -DCMAKE_INSTALL_PREFIX=/usr:
#   cpack --config BUILD/CPackConfig.cmake -B OUT [-D GLEANER_DEB_VERSION=0.1.0-2]
# cpack installs from the build as it is: nothing is compiled. The version, the desktop package's dependency on
# the agent of the same version and the Debian changelog are worked out at cpack time
# (cmake/GleanerCPackProject.cmake), so another version needs no new configure.
include(GNUInstallDirs)

set(GLEANER_DEB_REVISION 1 CACHE STRING "Debian revision of the packages' default version (PROJECT_VERSION-REVISION)")
set(GLEANER_DEB_MAINTAINER "Gleaner maintainers <maintainers@users.noreply.a-seed-90e50edc.example>"
    CACHE STRING "The packages' Maintainer field and changelog signature")
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "Packaging: CMAKE_INSTALL_PREFIX is ${CMAKE_INSTALL_PREFIX}; cpack refuses to build the Debian "
                 "packages from this build (they need /usr: installers/build-debs.sh configures it)")
endif()

set(installers ${PROJECT_SOURCE_DIR}/installers)
set(debian ${installers}/debian)

# gleaner-agent. The units name /usr paths: they are for the packages. Units go to /usr/lib/systemd/{system,user},
# which systemd and deb-systemd-helper read on Debian 12 (its /lib is /usr/lib).
install(FILES ${installers}/systemd/gleaner-agent.service
        DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/systemd/system COMPONENT agent)
install(FILES ${installers}/systemd/user/gleaner-agent.service
        DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/systemd/user COMPONENT agent)
# An example only: an organisation's /etc/gleaner/policy.json is its own choice, and no package installs one.
install(FILES ${installers}/policy.example.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/gleaner-agent/examples RENAME policy.json COMPONENT agent)
# The folder the policy goes into belongs to the package; the file in it never does.
install(DIRECTORY DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/gleaner COMPONENT agent)
# Each graphical session's `gleaner-agent session-report`, which tells the system agent of a shared workstation when
# the session is in use (docs/fleet.md): with the agent, since a fleet machine may have no tray app.
install(FILES ${PROJECT_SOURCE_DIR}/resources/desktop/gleaner-session.desktop
        DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/xdg/autostart COMPONENT agent)

# gleaner-coordinator.
install(FILES ${installers}/systemd/gleaner-coordinator.service
        DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/systemd/system COMPONENT coordinator)
file(GLOB gleaner_sample_jobs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/resources/jobs/*.json)
install(FILES ${gleaner_sample_jobs} DESTINATION ${CMAKE_INSTALL_DATADIR}/gleaner-coordinator/jobs
        COMPONENT coordinator)

# What every package's /usr/share/doc/PACKAGE holds, and its lintian overrides (each explained in the file).
foreach(component agent desktop coordinator)
  set(package gleaner-${component})
  set(doc ${CMAKE_INSTALL_DATADIR}/doc/${package})
  if(EXISTS ${debian}/${package}/copyright)
    install(FILES ${debian}/${package}/copyright DESTINATION ${doc} COMPONENT ${component})
  else()
    install(FILES ${debian}/copyright DESTINATION ${doc} COMPONENT ${component})
  endif()
  install(FILES ${PROJECT_SOURCE_DIR}/docs/packages.md DESTINATION ${doc} COMPONENT ${component})
  # Written by cpack (GleanerCPackProject.cmake) for the version it packages; absent from a plain `cmake --install`.
  install(FILES ${PROJECT_BINARY_DIR}/debian/changelog.Debian.gz DESTINATION ${doc} COMPONENT ${component} OPTIONAL)
  if(EXISTS ${debian}/${package}/lintian-overrides)
    install(FILES ${debian}/${package}/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
            RENAME ${package} COMPONENT ${component})
  endif()
  set(extra)
  foreach(script postinst prerm postrm conffiles)
    if(EXISTS ${debian}/${package}/${script})
      list(APPEND extra ${debian}/${package}/${script})
    endif()
  endforeach()
  string(TOUPPER ${component} COMPONENT)
  set(CPACK_DEBIAN_${COMPONENT}_PACKAGE_NAME ${package})
  set(CPACK_DEBIAN_${COMPONENT}_PACKAGE_CONTROL_EXTRA "${extra}")
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME gleaner)
set(CPACK_PACKAGE_VENDOR "The Gleaner developers")
set(CPACK_PACKAGE_CONTACT "${GLEANER_DEB_MAINTAINER}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_COMPONENTS_ALL agent desktop coordinator)
set(CPACK_DEB_COMPONENT_INSTALL ON)
# Absolute destinations (/etc/xdg/autostart, /etc/gleaner) land in the package's tree, not on this machine.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_COMPRESSION_TYPE xz)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends: the shared libraries' packages as dpkg-shlibdeps computes them, plus what it cannot see: the maintainer
# scripts' adduser and the Qt plugins loaded at run time (the SQLite driver of the agent's and the coordinator's
# databases; the tray app's platform plugin, in GleanerCPackProject.cmake).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_AGENT_PACKAGE_DEPENDS "adduser, libqt6sql6-sqlite")
set(CPACK_DEBIAN_COORDINATOR_PACKAGE_DEPENDS "adduser, libqt6sql6-sqlite")
# The per-user agent of an X11 desktop loads libxcb-screensaver for the idle time (docs/desktop.md).
set(CPACK_DEBIAN_DESKTOP_PACKAGE_RECOMMENDS "libxcb-screensaver0")
# The sample jobs train on Debian's Fashion-MNIST; image-folder datasets in WebP or TIFF need Qt's extra image
# format plugins (PNG, JPEG, BMP and GIF come with Qt Gui itself).
# A coordinator whose config.json names a PostgreSQL database needs Qt's PostgreSQL driver (docs/scale-out.md).
set(CPACK_DEBIAN_COORDINATOR_PACKAGE_SUGGESTS "dataset-fashion-mnist, qt6-image-formats-plugins, libqt6sql6-psql")
set(CPACK_DEBIAN_AGENT_PACKAGE_SECTION science)
set(CPACK_DEBIAN_DESKTOP_PACKAGE_SECTION x11)
set(CPACK_DEBIAN_COORDINATOR_PACKAGE_SECTION science)

# Synopsis on the first line; the rest is the extended description (lines under 80 columns).
set(CPACK_DEBIAN_AGENT_DESCRIPTION "Gleaner agent: trains deep-learning subtasks while the machine is idle
Gleaner trains deep-learning models on computers that would otherwise sit
idle. The agent fetches signed subtasks from a Gleaner coordinator, trains
them with libtorch in sandboxed worker processes when the machine is idle and
within the limits its owner or organisation set, and uploads the results.
.
This package holds gleaner-agent, its worker, a systemd system service that
runs as the user gleaner with the limits of /etc/gleaner/policy.json, and a
user service for per-user agents.")
set(CPACK_DEBIAN_DESKTOP_DESCRIPTION "Gleaner tray app for volunteers' desktops
Gleaner trains deep-learning models on computers that would otherwise sit
idle. This package holds the tray app gleaner: it enrolls the desktop with a
coordinator on its first start, starts the per-user agent, shows what it does
and sets when it may compute. It starts at login for every user.")
set(CPACK_DEBIAN_COORDINATOR_DESCRIPTION "Gleaner coordinator: splits training jobs into subtasks for agents
Gleaner trains deep-learning models on computers that would otherwise sit
idle. The coordinator splits a training job into subtasks, leases them to
agents over HTTPS, folds their results into the server copy of the model,
validates it and serves an admin dashboard.
.
This package holds gleaner-coordinator, a systemd service that starts once
the admin has run gleaner-coordinator init, and sample jobs.")

# Read by cpack, not by cmake: the version and what depends on it.
set(CPACK_PROJECT_CONFIG_FILE ${PROJECT_SOURCE_DIR}/cmake/GleanerCPackProject.cmake)
set(CPACK_GLEANER_SOURCE_DIR ${PROJECT_SOURCE_DIR})
set(CPACK_GLEANER_BINARY_DIR ${PROJECT_BINARY_DIR})
set(CPACK_GLEANER_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_GLEANER_DEB_REVISION ${GLEANER_DEB_REVISION})
set(CPACK_GLEANER_DEB_MAINTAINER ${GLEANER_DEB_MAINTAINER})

include(CPack)
