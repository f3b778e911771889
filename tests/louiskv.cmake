# LouisKV (issue 17): decode-time retrieval (the runner, LouisKV's clusters and boundaries, Quest's
# pages) checked against dense full attention.
engram_add_test(test_louiskv SOURCES test_louiskv.cpp TORCH)
