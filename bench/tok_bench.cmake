# tok_bench: tokenizer encode throughput (1 thread) on the test corpus, interleaved with HF
# tokenizers' in the same run (bench/tok_bench_hf.py through the .venv oracle interpreter).
add_executable(tok_bench ${CMAKE_CURRENT_LIST_DIR}/tok_bench.c)
target_link_libraries(tok_bench PRIVATE srt_tok)
target_compile_definitions(tok_bench PRIVATE
  SRT_TOK_BENCH_DEFAULT_JSON="${CMAKE_BINARY_DIR}/${CMAKE_INSTALL_DATADIR}/shadowrt/tokenizers/deepseek-v4/tokenizer.json"
  SRT_TOK_BENCH_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
