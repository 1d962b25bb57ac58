# Fuzzing of lattice's file parsers (tests/fuzz/README.md), included by tests/CMakeLists.txt.
# Each fuzz.<target> test builds the clang/libFuzzer tree (tests/fuzz/CMakeLists.txt) into
# <build>/fuzz-build if needed, replays tests/fuzz/regressions/<target>/ and fuzzes for
# FUZZ_SECONDS (default 30) under ASan + UBSan. Skipped (exit 77) without clang, lld or libFuzzer.
foreach(target safetensors token_file llmc trainer_json toml_config)
  add_test(NAME fuzz.${target}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/run.sh ${target} ${CMAKE_BINARY_DIR}/fuzz-build)
  set_tests_properties(fuzz.${target} PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77 RESOURCE_LOCK fuzz_tree
                                                 LABELS fuzz)
endforeach()
