# Helpers shared by every part of the tree.

# Every directory below `dir` that has a CMakeLists.txt, in sorted order.
function(srt_add_subdirs dir)
  file(GLOB children RELATIVE "${dir}" "${dir}/*")
  list(SORT children)
  foreach(child IN LISTS children)
    if(IS_DIRECTORY "${dir}/${child}" AND EXISTS "${dir}/${child}/CMakeLists.txt")
      add_subdirectory("${dir}/${child}")
    endif()
  endforeach()
endfunction()

# srt_add_plugin(<target> SOURCES ... [LIBS ...])
# A plugin is a MODULE library with hidden symbols (only srt_plugin_entry is exported through
# SRT_EXPORT), linked with --no-undefined, written to the build tree's plugin directory and
# installed to lib/shadowrt/plugins.
function(srt_add_plugin target)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${target} MODULE ${P_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX ""
    LIBRARY_OUTPUT_DIRECTORY "${SRT_PLUGIN_OUTPUT_DIR}")
  target_link_libraries(${target} PRIVATE srt_abi ${P_LIBS})
  target_link_options(${target} PRIVATE -Wl,--no-undefined)
  install(TARGETS ${target} LIBRARY DESTINATION "${SRT_PLUGIN_INSTALL_DIR}")
endfunction()

# srt_add_check_test(<name> SOURCES ... [LIBS ...])
# One `check` suite as a ctest test. Skipped (with a message) when check is not installed.
# No time limits: a loaded machine can exceed any fixed one. ctest sets no TIMEOUT, and
# CK_TIMEOUT_MULTIPLIER=0 turns off check's per-case timers (its default 4 s and every
# tcase_set_timeout). A TIMEOUT argument is accepted and ignored. To bound a hung run, give
# scripts/test.sh SRT_TEST_TIMEOUT=<seconds> (a per-test ctest limit, off by default).
function(srt_add_check_test name)
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT CHECK_FOUND)
    message(WARNING "check not found: test ${name} not built")
    return()
  endif()
  add_executable(${name} ${T_SOURCES})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/tests")
  target_link_libraries(${name} PRIVATE PkgConfig::CHECK ${T_LIBS})
  add_test(NAME ${name} COMMAND ${name} WORKING_DIRECTORY "${CMAKE_BINARY_DIR}")
  set_tests_properties(${name} PROPERTIES LABELS unit)
  set_tests_properties(${name} PROPERTIES
    ENVIRONMENT "SRT_SOURCE_DIR=${PROJECT_SOURCE_DIR};SRT_BUILD_DIR=${CMAKE_BINARY_DIR};SRT_PLUGIN_DIR=${SRT_PLUGIN_OUTPUT_DIR};CK_TIMEOUT_MULTIPLIER=0")
endfunction()
