engram_add_test(test_bad_input SOURCES test_bad_input.cpp TORCH)
