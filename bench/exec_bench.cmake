# exec_bench: executor prefill/decode tokens/s on the small preset, 1 and 2 threads, bytes per
# decode step and the ratio to the measured memory bandwidth. Included from bench/CMakeLists.txt.
if(TARGET srt_exec)
  add_executable(exec_bench ${CMAKE_CURRENT_LIST_DIR}/exec_bench.c)
  target_link_libraries(exec_bench PRIVATE srt_exec Threads::Threads)
  add_dependencies(exec_bench srt_attn_swa srt_attn_csa srt_attn_hca srt_moe_fp4
    srt_residual_mhc)
endif()
