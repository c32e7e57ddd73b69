# The dataset mode (`mimi dataset`, app/dataset/): unit and CLI tests, and the GNU parallel and
# Slurm engine tests (scripts; a missing engine is a stated skip, exit 77).
add_executable(test_dataset dataset/test_dataset.cpp dataset/test_dataset_paths.cpp dataset/test_dataset_books.cpp
                            dataset/test_dataset_agree.cpp)
target_link_libraries(test_dataset PRIVATE mimi_cli_support)
add_test(NAME dataset_unit COMMAND test_dataset "--test-case=dataset unit*")
add_test(NAME dataset_cli COMMAND test_dataset "--test-case=dataset cli*")
# Issue 26's generated sweeps: names that are any bytes, link trees, FIFOs, encodings, bad lines
# (dataset_paths); .done trust, verify's cross-checks, segments past the end, many shards (dataset_books,
# with test_dataset_agree.cpp: every .done field tampered, status and the worker on replaced plans,
# plan-time header checks, option values).
add_test(NAME dataset_paths COMMAND test_dataset "--test-case=dataset paths*")
add_test(NAME dataset_books COMMAND test_dataset "--test-case=dataset books*")
set_tests_properties(dataset_unit dataset_cli dataset_paths dataset_books PROPERTIES LABELS "dataset" TIMEOUT 600)

add_test(NAME dataset_parallel
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dataset/parallel_test.sh $<TARGET_FILE:mimi>
                 ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny/weights.hf.safetensors)
set_tests_properties(dataset_parallel PROPERTIES LABELS "dataset" SKIP_RETURN_CODE 77 TIMEOUT 900)

add_test(NAME dataset_slurm
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dataset/slurm_test.sh $<TARGET_FILE:mimi>
                 ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny/weights.hf.safetensors)
set_tests_properties(dataset_slurm PROPERTIES LABELS "dataset" SKIP_RETURN_CODE 77 TIMEOUT 900)
