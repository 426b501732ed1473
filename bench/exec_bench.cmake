# exec_bench: executor prefill/decode tokens/s on the small preset, 1 and 2 threads, bytes per
# decode step and the ratio to the measured memory bandwidth. Included from bench/CMakeLists.txt.
if(TARGET srt_exec)
  add_executable(exec_bench ${CMAKE_CURRENT_LIST_DIR}/exec_bench.c)
  target_link_libraries(exec_bench PRIVATE srt_exec Threads::Threads)
  add_dependencies(exec_bench srt_attn_swa srt_attn_csa srt_attn_hca srt_moe_fp4
    srt_residual_mhc)
endif()
# --help prints the options and exits (it must not start the benchmark); a bad option fails.
if(TARGET exec_bench)
  add_test(NAME exec_bench_help COMMAND exec_bench --help)
  set_tests_properties(exec_bench_help PROPERTIES LABELS unit
    PASS_REGULAR_EXPRESSION "usage: exec_bench.*--depths LIST.*--profile")
  add_test(NAME exec_bench_bad_option COMMAND exec_bench --depths 10 --prompt 256)
  set_tests_properties(exec_bench_bad_option PROPERTIES LABELS unit WILL_FAIL TRUE)
endif()
