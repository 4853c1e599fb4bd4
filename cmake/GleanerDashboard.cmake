# gleaner_add_dashboard_assets(target)
# The admin dashboard's front end (coordinator/dashboard/web/) is bundled at build time with esbuild and compiled
# into `target` as a generated C++ source (DashboardAssetsData.cpp): no file is read at run time.
#
# Node.js (18 or later, Debian 12's nodejs) and npm are required. The pinned packages (package-lock.json) are
# installed into BUILD/dashboard-web/node_modules by `npm ci`, run only when that folder is missing or the lockfile
# changed: with node_modules present the build needs no network. GLEANER_NODE / GLEANER_NPM override the programs.

# Cached: tests/browser (another directory scope) runs playwright-core from the same node_modules.
set(GLEANER_DASHBOARD_WEB_DIR ${PROJECT_SOURCE_DIR}/coordinator/dashboard/web CACHE INTERNAL "")
set(GLEANER_DASHBOARD_BUILD_DIR ${PROJECT_BINARY_DIR}/dashboard-web CACHE INTERNAL "")

find_program(GLEANER_NODE NAMES node nodejs DOC "Node.js, to bundle the dashboard")
find_program(GLEANER_NPM NAMES npm DOC "npm, to install the dashboard's pinned packages")
if(NOT GLEANER_NODE)
  message(FATAL_ERROR "Node.js was not found: the coordinator's dashboard is bundled at build time. Install the "
                      "Debian package 'nodejs' (apt-get install nodejs npm, or installers/install-deps.sh), or set "
                      "GLEANER_NODE to the node program.")
endif()
if(NOT GLEANER_NPM)
  message(FATAL_ERROR "npm was not found: it installs the dashboard's pinned packages. Install the Debian package "
                      "'npm' (apt-get install npm, or installers/install-deps.sh), or set GLEANER_NPM.")
endif()
execute_process(COMMAND ${GLEANER_NODE} --version OUTPUT_VARIABLE GLEANER_NODE_VERSION
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE node_result)
string(REGEX MATCH "^v([0-9]+)" node_major "${GLEANER_NODE_VERSION}")
if(NOT node_result EQUAL 0 OR CMAKE_MATCH_1 LESS 18)
  message(FATAL_ERROR "${GLEANER_NODE} is '${GLEANER_NODE_VERSION}'; the dashboard's build needs Node.js 18 or "
                      "later (Debian 12's package 'nodejs').")
endif()
message(STATUS "Dashboard: bundled with Node.js ${GLEANER_NODE_VERSION} (${GLEANER_NODE})")

function(gleaner_add_dashboard_assets target)
  set(web ${GLEANER_DASHBOARD_WEB_DIR})
  set(out ${GLEANER_DASHBOARD_BUILD_DIR})
  set(stamp ${out}/node_modules/.gleaner-npm-ci)
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out}
    COMMAND ${CMAKE_COMMAND} -E copy_if_different ${web}/package.json ${web}/package-lock.json ${out}
    # --ignore-scripts: nothing from the registry runs at build time (esbuild finds its binary without its
    # install script).
    COMMAND ${GLEANER_NPM} ci --ignore-scripts --no-audit --no-fund --loglevel=error
    COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
    DEPENDS ${web}/package.json ${web}/package-lock.json
    WORKING_DIRECTORY ${out}
    COMMENT "npm ci: the dashboard's pinned packages into ${out}/node_modules"
    VERBATIM)
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS ${web}/src/*)
  add_custom_command(
    OUTPUT ${out}/DashboardAssetsData.cpp
    COMMAND ${CMAKE_COMMAND} -E env NODE_PATH=${out}/node_modules ${GLEANER_NODE} ${web}/build.cjs --out ${out}
    DEPENDS ${stamp} ${web}/build.cjs ${sources}
    WORKING_DIRECTORY ${out}
    COMMENT "Bundling the dashboard (esbuild) into DashboardAssetsData.cpp"
    VERBATIM)
  target_sources(${target} PRIVATE ${out}/DashboardAssetsData.cpp)
endfunction()
