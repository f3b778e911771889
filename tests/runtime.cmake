engram_add_test(test_decoder_reference SOURCES test_decoder_reference.cpp TORCH)
engram_add_test(test_attention SOURCES test_attention.cpp TORCH)
engram_add_test(test_kv_sources SOURCES test_kv_sources.cpp TORCH)
# Paged KV: units across device, pinned pool and spill file; per-layer loads on the copy lane.
engram_add_test(test_kv_pages SOURCES test_kv_pages.cpp TORCH)
# EpiCache's waiting episodes as units of the pool: write-back, load, spill to disk.
engram_add_test(test_episode_kv_pool SOURCES test_episode_kv_pool.cpp TORCH)
engram_add_test(test_sampler SOURCES test_sampler.cpp TORCH)
engram_add_test(test_static_decode SOURCES test_static_decode.cpp TORCH)
# The memory engine (issue 14): policies through one runner against dense full attention.
engram_add_test(test_memory_policies SOURCES test_memory_policies.cpp TORCH)
