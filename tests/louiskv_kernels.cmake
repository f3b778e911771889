# LouisKV's kernels (issue 17): spherical k-means of keys, budgeted selection of variable-size
# units, the row gather from the pool; their reference bodies on the CPU (the CUDA bodies are
# compared with them by engram-gpu-checks on the device).
engram_add_test(test_louiskv_kernels SOURCES test_louiskv_kernels.cpp TORCH)
