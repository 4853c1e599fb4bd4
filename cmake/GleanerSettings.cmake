# gleaner_apply_common_settings(target): the one place for warnings and Qt defines.
function(gleaner_apply_common_settings target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
  if(GLEANER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  # Torch headers declare a member named `slots`; Qt keywords stay off everywhere.
  target_compile_definitions(${target} PRIVATE
    QT_NO_KEYWORDS
    QT_NO_CAST_FROM_BYTEARRAY
    QT_NO_URL_CAST_FROM_STRING
    QT_USE_QSTRINGBUILDER)
endfunction()
