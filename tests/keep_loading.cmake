# KEEP's layer pipeline (issue 16, §4.3): the serial / naive / layer-balanced load planner and the
# selective prefill fed from the paged pool.
engram_add_test(test_keep_loading SOURCES test_keep_loading.cpp TORCH)
