# Tests of the attn program; included by tests/CMakeLists.txt.  Commands run in tests/, where
# fixtures/ and data/ are.
if(NOT TARGET attn_cli)
  return()
endif()
set(ATTN_CLI_WD ${CMAKE_CURRENT_SOURCE_DIR})

add_test(NAME cli_help COMMAND attn_cli --help)
set_tests_properties(cli_help PROPERTIES PASS_REGULAR_EXPRESSION "eval.*walkthrough.*info")
add_test(NAME cli_version COMMAND attn_cli --version)
set_tests_properties(cli_version PROPERTIES PASS_REGULAR_EXPRESSION "attn ${PROJECT_VERSION}")
# an unknown subcommand is a usage error (exit 2)
add_test(NAME cli_unknown_command COMMAND attn_cli frobnicate)
set_tests_properties(cli_unknown_command PROPERTIES WILL_FAIL TRUE)
add_test(NAME cli_eval_list_ops COMMAND attn_cli eval --list-ops)
set_tests_properties(cli_eval_list_ops PROPERTIES PASS_REGULAR_EXPRESSION "multihead_attention")

# attn eval on a fixture, then the output compared with the expected file (one script so the
# comparison always sees this run's output)
add_test(NAME cli_eval_fixture
         COMMAND ${CMAKE_COMMAND} -DATTN=${ATTN_RUN_CLI}
                 -DCOMPARE=${ATTN_RUN_FIXTURES} -DCASE=multihead_attention_1
                 -DOUT=${CMAKE_CURRENT_BINARY_DIR}/cli_out.safetensors
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/cli_eval_compare.cmake
         WORKING_DIRECTORY ${ATTN_CLI_WD})

add_test(NAME cli_eval_missing_file
         COMMAND attn_cli eval fixtures/no_such_case.safetensors
                 -o ${CMAKE_CURRENT_BINARY_DIR}/cli_missing_out.safetensors
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_eval_missing_file PROPERTIES WILL_FAIL TRUE)

# the failure must be the refusal, with its message (the return code is checked by the next)
add_test(NAME cli_eval_unknown_op
         COMMAND attn_cli eval data/unknown_op.safetensors
                 -o ${CMAKE_CURRENT_BINARY_DIR}/cli_unknown_out.safetensors
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_eval_unknown_op PROPERTIES
                     PASS_REGULAR_EXPRESSION "attn eval: unknown op 'no_such_op'")
add_test(NAME cli_eval_unknown_op_status
         COMMAND attn_cli eval data/unknown_op.safetensors
                 -o ${CMAKE_CURRENT_BINARY_DIR}/cli_unknown_out.safetensors
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_eval_unknown_op_status PROPERTIES WILL_FAIL TRUE)

# -o is required: usage error
add_test(NAME cli_eval_no_output COMMAND attn_cli eval data/unknown_op.safetensors
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_eval_no_output PROPERTIES WILL_FAIL TRUE)

add_test(NAME cli_info COMMAND attn_cli info data/unknown_op.safetensors
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_info PROPERTIES PASS_REGULAR_EXPRESSION "op = no_such_op.*x +F32 +\\[2\\]")
# attn info --cpu: the description, then the measured rates (one timed run each, 1 thread)
# (under an emulator, ATTN_TEST_EMULATOR, a product of 64 rows: the full one takes minutes)
set(ATTN_CPU_ROWS "")
if(ATTN_TEST_EMULATOR)
  set(ATTN_CPU_ROWS --rows 64)
endif()
add_test(NAME cli_info_cpu COMMAND attn_cli info --cpu --repeat 1 --threads 1 ${ATTN_CPU_ROWS})
set_tests_properties(cli_info_cpu PROPERTIES PASS_REGULAR_EXPRESSION
                     "cpu: .*instruction set: .*bf16 attention: .*matmul precision \\(auto\\): .*float products +[0-9.]+ GFLOP/s.*bf16 / float speed")
add_test(NAME cli_bench_cpu_json
         COMMAND attn_cli bench --op cpu --repeat 1 --threads 1 --json ${ATTN_CPU_ROWS})
set_tests_properties(cli_bench_cpu_json PROPERTIES PASS_REGULAR_EXPRESSION
                     "^\\{\"threads\": 1, \"fma_peak_gflops\": [0-9.]+.*\"auto\": \"(f32|bf16)\", \"description\": \"cpu: [^\n]*\"\\}")
# attn info on a GGUF file (found by its magic): header, metadata, tensors, summary
add_test(NAME cli_info_gguf COMMAND attn_cli info fixtures/gguf/all_types_v3.gguf
         WORKING_DIRECTORY ${ATTN_CLI_WD})
string(CONCAT ATTN_GGUF_INFO_RE
  "GGUF version 3, alignment 32, 30 metadata entries, 10 tensors, data from byte 1664\n"
  ".*t\\.uint64 +UINT64 +18446744073709551615\n"
  ".*t\\.nul_string +STRING +\"a\\\\x00b\"\n"
  ".*t\\.arr\\.string +ARRAY\\[STRING\\] +4: \\[\"a\", \"\", "
  ".*q6_k\\.w4d +Q6_K +\\[256, 1, 2, 1\\] +420 bytes\n"
  ".*10 tensors, 982 bytes .*: F32 2, F16 1, Q4_0 1, Q4_1 1, Q5_0 1, Q8_0 1, Q4_K 1, Q6_K 1, "
  "BF16 1\n")
set_tests_properties(cli_info_gguf PROPERTIES PASS_REGULAR_EXPRESSION "${ATTN_GGUF_INFO_RE}")
# IQ4_NL and IQ4_XS tensors (tests/gen_quant_iq4.py): named, sized, summarised
add_test(NAME cli_info_gguf_iq4 COMMAND ${ATTN_RUN_CLI} info fixtures/quant/iq4.gguf
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_info_gguf_iq4 PROPERTIES PASS_REGULAR_EXPRESSION
                     "nl +IQ4_NL \\[32, 2\\] +36 bytes\n.*xs +IQ4_XS \\[256, 1\\] +136 bytes\n.*2 tensors, 172 bytes .*: IQ4_NL 1, IQ4_XS 1")
# a refused GGUF file: the reader's message, and exit status 1
add_test(NAME cli_info_gguf_big_endian COMMAND attn_cli info fixtures/gguf/big_endian.gguf
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_info_gguf_big_endian PROPERTIES
                     PASS_REGULAR_EXPRESSION "attn info: .*big_endian.gguf: .*big-endian GGUF")
add_test(NAME cli_info_gguf_big_endian_status COMMAND attn_cli info fixtures/gguf/big_endian.gguf
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_info_gguf_big_endian_status PROPERTIES WILL_FAIL TRUE)

add_test(NAME cli_walkthrough COMMAND attn_cli walkthrough WORKING_DIRECTORY ${ATTN_CLI_WD})

# attn train dates on a tiny model, then translate and draw with the checkpoint it wrote
set(ATTN_TINY ${CMAKE_CURRENT_BINARY_DIR}/tiny_dates)
add_test(NAME cli_train_tiny
         COMMAND attn_cli train dates --steps 4 --batch 4 --d-model 16 --heads 2 --layers 1
                 --ff 16 --eval-n 20 --eval-every 2 --out ${ATTN_TINY})
set_tests_properties(cli_train_tiny PROPERTIES FIXTURES_SETUP tiny_dates
                     PASS_REGULAR_EXPRESSION "model: .*model.safetensors")
add_test(NAME cli_translate COMMAND attn_cli translate --model ${ATTN_TINY}/model.safetensors
                                    "21 Nov 2026" "the 3rd of may 1999")
set_tests_properties(cli_translate PROPERTIES FIXTURES_REQUIRED tiny_dates
                     PASS_REGULAR_EXPRESSION "21 Nov 2026 +-> .*\nthe 3rd of may 1999 +-> ")
add_test(NAME cli_heatmap COMMAND attn_cli heatmap --model ${ATTN_TINY}/model.safetensors
                                  -o ${ATTN_TINY}/heat.png "21 Nov 2026")
set_tests_properties(cli_heatmap PROPERTIES FIXTURES_REQUIRED tiny_dates
                     PASS_REGULAR_EXPRESSION "heatmap: .*heat.png")
add_test(NAME cli_translate_bad_model COMMAND attn_cli translate --model no_such.safetensors "x")
set_tests_properties(cli_translate_bad_model PROPERTIES WILL_FAIL TRUE)
add_test(NAME cli_train_bad_option COMMAND attn_cli train dates --steps -3)
set_tests_properties(cli_train_bad_option PROPERTIES WILL_FAIL TRUE)

# attn train charlm (a tiny GPT on the Debian licence texts, or a given file) and attn generate
set(ATTN_TINYLM ${CMAKE_CURRENT_BINARY_DIR}/tiny_charlm)
add_test(NAME cli_charlm_tiny
         COMMAND attn_cli train charlm --text ${CMAKE_CURRENT_SOURCE_DIR}/../README.md
                 --d-model 16 --heads 2 --layers 1 --ff 32 --steps 5 --out ${ATTN_TINYLM})
set_tests_properties(cli_charlm_tiny PROPERTIES FIXTURES_SETUP tiny_charlm)
# SIGINT/SIGTERM stop a training run with a checkpoint; kill -9 at random moments leaves one
# that reads and resumes (the one training loop, src/train/loop.c)
add_test(NAME cli_train_interrupt
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_interrupt.sh ${ATTN_RUN_CLI}
                 ${CMAKE_CURRENT_SOURCE_DIR}/../README.md)
set_tests_properties(cli_train_interrupt PROPERTIES PASS_REGULAR_EXPRESSION "PASS" TIMEOUT 300)
# attn train charlm --dtype: kept in the checkpoint, followed by --resume, a mismatch refused
add_test(NAME cli_charlm_dtype
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_charlm_dtype.sh ${ATTN_RUN_CLI}
                 ${CMAKE_CURRENT_SOURCE_DIR}/../README.md ${CMAKE_CURRENT_BINARY_DIR}/charlm_dtype)
set_tests_properties(cli_charlm_dtype PROPERTIES PASS_REGULAR_EXPRESSION "PASS" TIMEOUT 300)
# --tensorboard: event files read back by a standard-library reader and compared with the log
add_test(NAME cli_train_tensorboard
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_train_tensorboard.sh ${ATTN_RUN_CLI}
                 ${CMAKE_CURRENT_SOURCE_DIR}/../README.md)
set_tests_properties(cli_train_tensorboard PROPERTIES PASS_REGULAR_EXPRESSION "PASS"
                     SKIP_RETURN_CODE 77 TIMEOUT 300)
add_test(NAME cli_generate
         COMMAND attn_cli generate --model ${ATTN_TINYLM}/model.safetensors --prompt "The "
                 --length 20 --seed 1)
set_tests_properties(cli_generate PROPERTIES FIXTURES_REQUIRED tiny_charlm
                     PASS_REGULAR_EXPRESSION "The ")
add_test(NAME cli_generate_bad COMMAND attn_cli generate --model no_such.safetensors)
set_tests_properties(cli_generate_bad PROPERTIES WILL_FAIL TRUE)

# attn embed / attn similar on the tiny random BERT written by tests/gen_bert.py
add_test(NAME cli_embed COMMAND attn_cli embed --model fixtures/bert_tiny "hello world" "東京"
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_embed PROPERTIES PASS_REGULAR_EXPRESSION "^-?[0-9]")
add_test(NAME cli_embed_json COMMAND attn_cli embed --model fixtures/bert_tiny --json "hello"
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_embed_json PROPERTIES PASS_REGULAR_EXPRESSION "\\[")
add_test(NAME cli_similar
         COMMAND attn_cli similar --model fixtures/bert_tiny --corpus data/corpus.txt "a cat on a mat"
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_similar PROPERTIES PASS_REGULAR_EXPRESSION "[0-9]\\.[0-9]+\t")
add_test(NAME cli_embed_bad_model COMMAND attn_cli embed --model no_such_dir "x"
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_embed_bad_model PROPERTIES WILL_FAIL TRUE)
add_test(NAME cli_similar_bf16
         COMMAND attn_cli similar --model fixtures/bert_tiny --dtype bf16 --corpus data/corpus.txt
                 "a cat on a mat" WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_similar_bf16 PROPERTIES PASS_REGULAR_EXPRESSION "[0-9]\\.[0-9]+\t")
add_test(NAME cli_embed_bad_dtype COMMAND attn_cli embed --model fixtures/bert_tiny --dtype f64 "x"
         WORKING_DIRECTORY ${ATTN_CLI_WD})
set_tests_properties(cli_embed_bad_dtype PROPERTIES WILL_FAIL TRUE)

# attn bench: tiny sizes only (the FMA-peak loop dominates the run time)
add_test(NAME cli_bench_sdpa COMMAND attn_cli bench --op sdpa --len 64 --repeat 1)
set_tests_properties(cli_bench_sdpa PROPERTIES PASS_REGULAR_EXPRESSION "GFLOP/s")
add_test(NAME cli_bench_json
         COMMAND attn_cli bench --op sdpa-backward --len 32 --heads 2 --repeat 1 --causal --json)
set_tests_properties(cli_bench_json PROPERTIES PASS_REGULAR_EXPRESSION "\"gflops\"")
add_test(NAME cli_bench_layers
         COMMAND attn_cli bench --op encoder-layer-backward --len 16 --heads 2 --dim 8 --repeat 1)
set_tests_properties(cli_bench_layers PROPERTIES PASS_REGULAR_EXPRESSION "GFLOP/s")
add_test(NAME cli_bench_mha_cross
         COMMAND attn_cli bench --op mha-backward --len 16 --kv-len 24 --heads 2 --dim 8
                 --repeat 1 --json)
set_tests_properties(cli_bench_mha_cross PROPERTIES PASS_REGULAR_EXPRESSION "\"gflops\"")
# gpt-step: a tiny GPT, its losses falling over the steps (the same batch each step)
add_test(NAME cli_bench_gpt_step
         COMMAND attn_cli bench --op gpt-step --layers 2 --heads 2 --dim 8 --len 16 --batch 2
                 --vocab 40 --repeat 3 --json)
set_tests_properties(cli_bench_gpt_step PROPERTIES
                     PASS_REGULAR_EXPRESSION "\"tokens_per_s\".*\"losses\": \\[[0-9.]+, ")
add_test(NAME cli_bench_gpt_step_wrong_op
         COMMAND attn_cli bench --op sdpa --layers 2 --len 16)
set_tests_properties(cli_bench_gpt_step_wrong_op PROPERTIES
                     PASS_REGULAR_EXPRESSION "apply to --op gpt-step only")
add_test(NAME cli_bench_bf16 COMMAND attn_cli bench --dtype bf16 --len 64 --repeat 1 --json)
set_tests_properties(cli_bench_bf16 PROPERTIES
                     PASS_REGULAR_EXPRESSION "\"dtype\": \"bf16\".*bf16_speedup_over_f32")
add_test(NAME cli_bench_bf16_backward COMMAND attn_cli bench --dtype bf16 --op sdpa-backward)
set_tests_properties(cli_bench_bf16_backward PROPERTIES WILL_FAIL TRUE)
add_test(NAME cli_bench_bf16_message COMMAND attn_cli bench --dtype bf16 --op mha --len 64)
set_tests_properties(cli_bench_bf16_message PROPERTIES
                     PASS_REGULAR_EXPRESSION "bf16 applies to --op sdpa [(]bf16 q, k, v[)], encoder-layer")
add_test(NAME cli_bench_f16_message COMMAND attn_cli bench --dtype f16 --len 64)
set_tests_properties(cli_bench_f16_message PROPERTIES
                     PASS_REGULAR_EXPRESSION "f16 is not implemented yet")
add_test(NAME cli_bench_unknown_op COMMAND attn_cli bench --op frobnicate --len 64)
set_tests_properties(cli_bench_unknown_op PROPERTIES WILL_FAIL TRUE)
add_test(NAME cli_bench_bad_value COMMAND attn_cli bench --len 0)
set_tests_properties(cli_bench_bad_value PROPERTIES WILL_FAIL TRUE)

# Hostile input and output (tests/test_cli_io.sh, one test per case): standard output on
# /dev/full, closed or a pipe with no reader fails every printing command (exit 1, no SIGPIPE);
# the one text reader refuses devices, directories and streams past the bound, reads '-' and
# pipes, and never hangs on a FIFO; info/eval '-' read a stream no further than its safetensors
# header describes; every command refuses unknown options and takes --opt=value, '--' and -h;
# --threads 0 is the default; a training output folder is checked before training; -o - writes
# to stdout; attn info escapes control bytes from the file.
find_program(ATTN_BASH bash)
find_program(ATTN_TIMEOUT timeout)
if(ATTN_BASH AND ATTN_TIMEOUT AND NOT WIN32)
  set(ATTN_CLI_IO_CASES
      full_help full_version full_info full_eval full_eval_file full_walkthrough full_translate
      full_heatmap full_heatmap_stdout full_generate full_embed full_embed_ids full_similar
      full_bench full_train full_charlm full_demo help_full
      closed_embed closed_info closed_walkthrough closed_bench outputs_closed broken_pipe
      devzero directory missing fifo_no_writer stdin_dash pipe_path stdin_over_bound
      stdin_st_stream file_over_bound
      unknown_option help_every opt_equals opt_errors double_dash threads_default
      train_out_not_dir stdout_dash info_escapes)
  foreach(case ${ATTN_CLI_IO_CASES})
    add_test(NAME cli_io_${case}
             COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli_io.sh
                     ${ATTN_RUN_CLI} ${case} ${CMAKE_CURRENT_BINARY_DIR}/cli_io
                     ${ATTN_TINY} ${ATTN_TINYLM}
             WORKING_DIRECTORY ${ATTN_CLI_WD})
    set_tests_properties(cli_io_${case} PROPERTIES TIMEOUT 600
                         FIXTURES_REQUIRED "tiny_dates;tiny_charlm")
  endforeach()
endif()

# Every output option against hostile targets (tests/test_outputs.sh, one test per writer):
# existing files, private /dev/null and /dev/full nodes, FIFOs with and without a reader,
# links (kept, followed; dangling refused), links planted at temporary names, stale temporary
# files of dead processes, directories, ulimit -f, a full and a read-only tmpfs.
if(ATTN_BASH AND ATTN_TIMEOUT AND NOT WIN32)
  foreach(case eval export_gguf logits save_init heatmap train_lm export_hf)
    add_test(NAME cli_outputs_${case}
             COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_outputs.sh
                     ${ATTN_RUN_CLI} ${case} ${CMAKE_CURRENT_BINARY_DIR}/outputs
                     ${ATTN_TINY}
             WORKING_DIRECTORY ${ATTN_CLI_WD})
    set_tests_properties(cli_outputs_${case} PROPERTIES TIMEOUT 600
                         FIXTURES_REQUIRED "tiny_dates")
  endforeach()
endif()

# attn train vit / classify / attention-map on tiny IDX data written by tests/vit_tiny_data.c
# (tests/test_vit_cli.sh, one test per case): the setup case trains a tiny ViT for the others;
# resume equals an uninterrupted run bit for bit; missing, corrupt and wrong-size input and the
# checkpoints of the other tasks are refused with a message.
add_executable(vit_tiny_data ${CMAKE_CURRENT_SOURCE_DIR}/vit_tiny_data.c)
target_compile_options(vit_tiny_data PRIVATE ${ATTN_WARN})
attn_test_runner(ATTN_RUN_VIT_DATA vit_tiny_data)
if(ATTN_BASH AND ATTN_TIMEOUT AND NOT WIN32)
  set(ATTN_VIT_TMP ${CMAKE_CURRENT_BINARY_DIR}/vit_cli)
  set(ATTN_VIT_CASES json classify_index classify_file attention_map resume missing_data corrupt
      wrong_size other_model usage tensorboard)
  foreach(case setup ${ATTN_VIT_CASES})
    add_test(NAME cli_vit_${case}
             COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_vit_cli.sh
                     ${ATTN_RUN_CLI} ${ATTN_RUN_VIT_DATA} ${case} ${ATTN_VIT_TMP}
                     ${ATTN_TINY} ${ATTN_TINYLM}
             WORKING_DIRECTORY ${ATTN_CLI_WD})
    set_tests_properties(cli_vit_${case} PROPERTIES TIMEOUT 900)
  endforeach()
  set_tests_properties(cli_vit_setup PROPERTIES FIXTURES_SETUP tiny_vit)
  foreach(case ${ATTN_VIT_CASES})
    set_tests_properties(cli_vit_${case} PROPERTIES
                         FIXTURES_REQUIRED "tiny_vit;tiny_dates;tiny_charlm")
  endforeach()
endif()

# attn generate / chat / tokenize / perplexity / bench --op llm on the tiny GGUF llama
# (tests/test_llm_cli.sh, one test per case)
if(ATTN_BASH AND ATTN_TIMEOUT AND NOT WIN32)
  # train_lm*, export*: attn train lm and attn export; export_transformers checks the exports
  # with transformers (tests/check_export.py) when ATTN_TEST_PYTHON (default: python3 on the
  # PATH) has transformers, torch and gguf, and is skipped (77) otherwise
  find_program(ATTN_TEST_PYTHON NAMES python3 HINTS "$ENV{VIRTUAL_ENV}/bin")
  foreach(case tokenize generate chat chat_template perplexity bench errors train_lm
          train_lm_resume train_lm_bf16 train_lm_gguf train_lm_errors export export_families
          export_transformers)
    add_test(NAME cli_llm_${case}
             COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_llm_cli.sh
                     ${ATTN_RUN_CLI} ${case} ${CMAKE_CURRENT_BINARY_DIR}/llm_cli
             WORKING_DIRECTORY ${ATTN_CLI_WD})
    set_tests_properties(cli_llm_${case} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                         ENVIRONMENT "ATTN_TEST_PYTHON=${ATTN_TEST_PYTHON}")
  endforeach()
endif()

# attn serve (cli/serve.c) on the tiny GGUF llama and the tiny BERT (tests/test_serve.sh):
# only where the program was built with GNU libmicrohttpd; skipped (77) without curl or python3
if(MHD_FOUND AND ATTN_BASH AND NOT WIN32)
  add_test(NAME cli_serve
           COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_serve.sh
                   ${ATTN_RUN_CLI} ${CMAKE_CURRENT_BINARY_DIR}/serve_cli
           WORKING_DIRECTORY ${ATTN_CLI_WD})
  set_tests_properties(cli_serve PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS serve)
  # the chat page in headless Chromium (tests/test_serve_page.sh): skipped (77) without it;
  # the screenshot stays in serve_page/page.png
  add_test(NAME cli_serve_page
           COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_serve_page.sh
                   ${ATTN_RUN_CLI} ${CMAKE_CURRENT_BINARY_DIR}/serve_page
           WORKING_DIRECTORY ${ATTN_CLI_WD})
  set_tests_properties(cli_serve_page PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 LABELS serve)
  # tool calls with the openai package and the real SmolLM2 (tests/test_serve_openai.sh):
  # skipped (77) without ATTN_SMOLLM2_GGUF or a Python with openai (ATTN_OPENAI_PYTHON)
  add_test(NAME cli_serve_openai_tools
           COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_serve_openai.sh
                   ${ATTN_RUN_CLI}
           WORKING_DIRECTORY ${ATTN_CLI_WD})
  set_tests_properties(cli_serve_openai_tools PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       LABELS serve)
elseif(NOT MHD_FOUND)
  # without libmicrohttpd: the stub says how to get it
  add_test(NAME cli_serve_stub COMMAND attn_cli serve --model fixtures/llama_tiny.gguf
           WORKING_DIRECTORY ${ATTN_CLI_WD})
  set_tests_properties(cli_serve_stub PROPERTIES LABELS serve PASS_REGULAR_EXPRESSION
                       "attn serve needs GNU libmicrohttpd: apt-get install libmicrohttpd-dev")
endif()

# attn plot on hand-written training logs (tests/test_plot.sh, one test per case)
if(ATTN_BASH AND ATTN_TIMEOUT AND NOT WIN32)
  foreach(case svg png csv errors)
    add_test(NAME cli_plot_${case}
             COMMAND ${ATTN_BASH} ${CMAKE_CURRENT_SOURCE_DIR}/test_plot.sh
                     ${ATTN_RUN_CLI} ${case} ${CMAKE_CURRENT_BINARY_DIR}/plot_cli
             WORKING_DIRECTORY ${ATTN_CLI_WD})
    set_tests_properties(cli_plot_${case} PROPERTIES TIMEOUT 300)
  endforeach()
endif()
