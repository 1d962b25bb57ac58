# Fuzzing of lattice's file parsers (tests/fuzz/README.md), included by tests/CMakeLists.txt.
# Each fuzz.<target> test builds the clang/libFuzzer tree (tests/fuzz/CMakeLists.txt) into
# <build>/fuzz-build if needed, replays tests/fuzz/regressions/<target>/ and fuzzes for
# FUZZ_SECONDS under ASan + UBSan: unless it is set, 20 CPU-seconds a target in the suite
# (FUZZ_SUITE_CPU_SECONDS, split over up to one worker a usable CPU, 10 s each at least: 10 s on CI's
# two cores; run.sh's default by hand is 30 s on every CPU), which keeps the suite under 20 minutes.
# Skipped (exit 77) without clang, lld or libFuzzer.
foreach(target safetensors token_file llmc trainer_json toml_config)
  add_test(NAME fuzz.${target}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run.sh ${target} ${CMAKE_BINARY_DIR}/fuzz-build)
  set_tests_properties(fuzz.${target} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 RESOURCE_LOCK fuzz_tree
                                                 LABELS fuzz ENVIRONMENT "FUZZ_SUITE_CPU_SECONDS=20")
endforeach()
