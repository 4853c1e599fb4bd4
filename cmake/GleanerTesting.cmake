# gleaner_add_test(Name SOURCES a.cpp ... [LIBS lib ...] [LABELS unit|integration|gui|browser|slow|postgres|redis ...]
#                  [TIMEOUT seconds] [XVFB])
# One QtTest executable per class under test, registered with ctest. Every test runs with the offscreen
# Qt platform and with HOME / XDG directories pointed into the build tree, so no test touches a user's
# real settings, cache or data. XVFB runs the test inside a private Xvfb server (tests/tools/with-xvfb.sh sets
# DISPLAY), for tests of the X11 idle time and of real windows.
# postgres: the test starts a throwaway PostgreSQL server (tests/support/PostgresServer.h).
# redis: the test starts a throwaway Redis server (tests/support/RedisServer.h).
set(GLEANER_TEST_LABELS unit integration gui browser slow postgres redis)

function(gleaner_add_test name)
  cmake_parse_arguments(ARG "XVFB" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "gleaner_add_test(${name}): SOURCES is required")
  endif()
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  foreach(label IN LISTS ARG_LABELS)
    if(NOT label IN_LIST GLEANER_TEST_LABELS)
      message(FATAL_ERROR "gleaner_add_test(${name}): unknown label '${label}' (use ${GLEANER_TEST_LABELS})")
    endif()
  endforeach()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()

  add_executable(${name} ${ARG_SOURCES})
  gleaner_apply_common_settings(${name})
  target_link_libraries(${name} PRIVATE Qt6::Test gleaner_testsupport ${ARG_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests)

  set(sandbox ${PROJECT_BINARY_DIR}/test-home/${name})
  if(ARG_XVFB)
    add_test(NAME ${name} COMMAND sh ${PROJECT_SOURCE_DIR}/tests/tools/with-xvfb.sh $<TARGET_FILE:${name}>)
  else()
    add_test(NAME ${name} COMMAND ${name})
  endif()
  # QtTest's own watchdog (5 minutes) must not end a long test before ctest's TIMEOUT does.
  math(EXPR watchdog_ms "${ARG_TIMEOUT} * 1000")
  set_tests_properties(${name} PROPERTIES
    LABELS "${ARG_LABELS}"
    TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "QTEST_FUNCTION_TIMEOUT=${watchdog_ms};QT_QPA_PLATFORM=offscreen;HOME=${sandbox};XDG_CONFIG_HOME=${sandbox}/config;XDG_CACHE_HOME=${sandbox}/cache;XDG_DATA_HOME=${sandbox}/data;XDG_RUNTIME_DIR=${sandbox}/run;GLEANER_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# gleaner_add_benchmark(Name SOURCES a.cpp ... [LIBS lib ...])
# A benchmark program (tests/bench/) that prints JSON figures into build/bench/, registered with ctest as
# Name_quick running `Name --quick` (label slow), so it keeps building and working without timing anything.
function(gleaner_add_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  gleaner_apply_common_settings(${name})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
  add_test(NAME ${name}_quick COMMAND ${name} --quick)
  set_tests_properties(${name}_quick PROPERTIES LABELS slow TIMEOUT 120)
endfunction()
