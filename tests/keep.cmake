# KEEP (issue 16): memory units assembled with re-rotated KV, the selective-recomputation runner,
# importance propagation and the CacheBlend / full-reuse / prefix-cache / full-recompute baselines.
engram_add_test(test_keep SOURCES test_keep.cpp TORCH)
