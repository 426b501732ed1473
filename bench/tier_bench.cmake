# tier_bench: L3 put/get throughput and latency per backend, host-arena copy vs memcpy.
# Included from bench/CMakeLists.txt. Loads the storage plugins from the build tree and reuses
# the tier tests' helpers (plugin loading, a loopback redis-server).
add_executable(tier_bench ${CMAKE_CURRENT_LIST_DIR}/tier_bench.c)
target_include_directories(tier_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests/tier)
target_link_libraries(tier_bench PRIVATE srt_tier srt_tier_testutil)
foreach(p srt_tier_host srt_tier_file srt_tier_sqlite srt_tier_redis)
  if(TARGET ${p})
    add_dependencies(tier_bench ${p})
  endif()
endforeach()
