# ttft_bench: time to first token computed / L1 / L2 / L3 (file, sqlite, redis) hit on the
# executor. Included from bench/CMakeLists.txt.
if(TARGET srt_exec AND TARGET srt_tier_testutil)
  add_executable(ttft_bench ${CMAKE_CURRENT_LIST_DIR}/ttft_bench.c)
  target_include_directories(ttft_bench PRIVATE ${PROJECT_SOURCE_DIR}/tests/tier)
  target_link_libraries(ttft_bench PRIVATE srt_exec srt_tier_testutil Threads::Threads)
  add_dependencies(ttft_bench srt_attn_swa srt_attn_csa srt_attn_hca srt_moe_fp4
    srt_residual_mhc srt_tier_host srt_tier_file srt_tier_sqlite)
  if(TARGET srt_tier_redis)
    add_dependencies(ttft_bench srt_tier_redis)
  endif()
endif()
