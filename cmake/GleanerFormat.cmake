# `cmake --build build --target format` applies .clang-format to every C++ file of the project.
find_program(CLANG_FORMAT_PROGRAM NAMES clang-format clang-format-14)
if(CLANG_FORMAT_PROGRAM)
  file(GLOB_RECURSE GLEANER_FORMAT_SOURCES CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/shared/*.cpp ${PROJECT_SOURCE_DIR}/shared/*.h
    ${PROJECT_SOURCE_DIR}/agent/*.cpp ${PROJECT_SOURCE_DIR}/agent/*.h
    ${PROJECT_SOURCE_DIR}/coordinator/*.cpp ${PROJECT_SOURCE_DIR}/coordinator/*.h
    ${PROJECT_SOURCE_DIR}/gui/*.cpp ${PROJECT_SOURCE_DIR}/gui/*.h
    ${PROJECT_SOURCE_DIR}/tests/*.cpp ${PROJECT_SOURCE_DIR}/tests/*.h)
  add_custom_target(format
    COMMAND ${CLANG_FORMAT_PROGRAM} -i --style=file ${GLEANER_FORMAT_SOURCES}
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "Formatting C++ sources with clang-format"
    VERBATIM)
else()
  add_custom_target(format
    COMMAND ${CMAKE_COMMAND} -E echo "clang-format not found: apt-get install clang-format"
    COMMAND ${CMAKE_COMMAND} -E false)
endif()
