engram_add_test(test_decoder_reference SOURCES test_decoder_reference.cpp TORCH)
engram_add_test(test_attention SOURCES test_attention.cpp TORCH)
engram_add_test(test_kv_sources SOURCES test_kv_sources.cpp TORCH)
engram_add_test(test_sampler SOURCES test_sampler.cpp TORCH)
