# EpiCache (issue 15): episode clustering, the patched-prompt block prefill and Eq. 3 scoring.
engram_add_test(test_epicache SOURCES test_epicache.cpp TORCH)
