# One bounded libFuzzer run (CTest fuzz.<name>): the committed corpus and regressions are copied
# to a scratch corpus under the build tree (new inputs land there, never in the source tree), the
# fuzzer runs SECONDS seconds over it, and a crash, a timeout, an out-of-memory or a leak fails
# the test, naming the input libFuzzer wrote (and how to keep it as a regression).
#   cmake -DFUZZER=... -DCORPUS=... -DREGRESSIONS=... -DWORK_DIR=... -DSECONDS=45 -P run_fuzzer.cmake
foreach(required FUZZER CORPUS REGRESSIONS WORK_DIR SECONDS)
  if(NOT DEFINED ${required})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${required}= is required")
  endif()
endforeach()
if(NOT EXISTS ${FUZZER})
  message(FATAL_ERROR "${FUZZER} is missing: the fixture fuzz.build builds it")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/corpus ${WORK_DIR}/artifacts)
file(GLOB seeds ${CORPUS}/* ${REGRESSIONS}/*)
list(FILTER seeds EXCLUDE REGEX "/README[^/]*$")
list(LENGTH seeds seed_count)
if(seed_count)
  file(COPY ${seeds} DESTINATION ${WORK_DIR}/corpus)
endif()
get_filename_component(name ${CORPUS} NAME)
# -timeout: one input may take 20 s (a slow input is a finding); -rss_limit_mb: ASan's shadow
# included; -max_len 16 KiB: room for nesting and long lists, still fast; -malloc_limit_mb: one
# allocation's bound (MALLOC_LIMIT_MB: config.json's harness allows 64 MiB, so a config that makes
# any row allocate per layer before its depth is checked is a finding).
if(NOT MALLOC_LIMIT_MB)
  set(MALLOC_LIMIT_MB 3072)
endif()
set(log ${WORK_DIR}/fuzzer.log)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=20 -rss_limit_mb=3072 -malloc_limit_mb=${MALLOC_LIMIT_MB}
          -max_len=16384
          -print_final_stats=1 -artifact_prefix=${WORK_DIR}/artifacts/ ${WORK_DIR}/corpus
  WORKING_DIRECTORY ${WORK_DIR} OUTPUT_FILE ${log} ERROR_FILE ${log} RESULT_VARIABLE result)
file(READ ${log} output)
if(result EQUAL 0)
  string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" runs "${output}")
  string(REGEX MATCH "#[0-9]+[ \t]+DONE[^\n]*" done "${output}")
  message(STATUS "fuzz.${name}: ${seed_count} seed inputs, ${SECONDS} s: ${done} (${runs})")
  return()
endif()
string(LENGTH "${output}" length)
if(length GREATER 12000)
  math(EXPR start "${length} - 12000")
  string(SUBSTRING "${output}" ${start} -1 output)
endif()
file(GLOB found ${WORK_DIR}/artifacts/*)
set(kept "")
foreach(input ${found})
  string(APPEND kept "\n  ${input}")
endforeach()
message(FATAL_ERROR "fuzz.${name} failed (exit ${result}):\n${output}\n"
  "Input(s) written by libFuzzer:${kept}\n"
  "Reproduce: ${FUZZER} <input>. After the fix, keep the input as a regression: copy it to "
  "${REGRESSIONS}/ (libfuzzer_replay_tests replays it in every build).")
