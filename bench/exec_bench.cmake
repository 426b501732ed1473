# exec_bench: executor prefill/decode tokens/s on the small preset, 1 and 2 threads, bytes per
# decode step and the ratio to the measured memory bandwidth. Included from bench/CMakeLists.txt.
if(TARGET srt_exec)
  add_executable(exec_bench ${CMAKE_CURRENT_LIST_DIR}/exec_bench.c)
  target_link_libraries(exec_bench PRIVATE srt_exec Threads::Threads PkgConfig::JANSSON)
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
# The KV a decode step reads, on the tiny preset (6 layers: 3 CSA, 2 HCA, 1 window-only;
# head_dim 128 with 64 rope dims, hidden 256: an FP8 KV entry is 64 + 2·64 + 1 scale byte,
# padded to 200 bytes; an FP4 index entry 64 + 4 = 68; a CSA state 32768 bytes of rings and an
# HCA state 1536 of online sums, each plus 3088 of pending rows: a 16-byte header and 3 rows of
# 256 floats). At depth 64: window 64 rows x 200 x 6 + c4_kv 16 x 200 x 3 + c4_index 16 x 68 x
# 3 + states 35856 x 3 + 4624 x 2 = 206480 bytes = 0.20 MiB. At depth 1024: window 128 rows x
# 200 x 6 + c4_kv top-k 64 x 200 x 3 + c4_index 256 x 68 x 3 + c128_kv 8 x 200 x 2 + the
# states = 364240 bytes = 0.35 MiB (the sequence holds 1.23 MiB).
if(TARGET exec_bench)
  add_test(NAME exec_bench_kv_read
    COMMAND exec_bench --model ${CMAKE_BINARY_DIR}/models/tiny --prompt 64 --depths 1024
            --runs 1 --steps 2 --warmup 0 --threads 1)
  set_tests_properties(exec_bench_kv_read PROPERTIES FIXTURES_REQUIRED tiny_model LABELS unit
    PASS_REGULAR_EXPRESSION "depth +64 \\(short\\): [^\n]* 0\\.20 MiB KV read per step [^\n]*\n[^\n]*depth +1024: [^\n]* 0\\.35 MiB KV read per step \\(of 1\\.23 MiB held\\)")
endif()
# --json: the same figures as one JSON object on stdout (the text on stderr), checked by a
# script against the hand count above and against each other.
if(TARGET exec_bench)
  add_test(NAME exec_bench_json
    COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/bench/test_exec_bench_json.py
            $<TARGET_FILE:exec_bench> ${CMAKE_BINARY_DIR}/models/tiny)
  set_tests_properties(exec_bench_json PROPERTIES FIXTURES_REQUIRED tiny_model LABELS unit)
endif()
