# The bundled default model (resources/models/engram-tiny) through the normal loader, on the CPU.
engram_add_test(test_bundled_model SOURCES test_bundled_model.cpp LIBS engram_env TORCH TIMEOUT 600)
set_target_properties(test_bundled_model_obj PROPERTIES AUTOMOC ON)
# ChatSession with the bundled model: the engram template end to end (quotes off, KV reused).
engram_add_test(test_bundled_chat SOURCES test_bundled_chat.cpp TORCH TIMEOUT 300)
set_target_properties(test_bundled_chat_obj PROPERTIES AUTOMOC ON)
# Chats longer than the model's positions under a policy, append-only saves (issue 14).
engram_add_test(test_long_chat SOURCES test_long_chat.cpp LIBS engram_env engram_storage TORCH
                TIMEOUT 1200)
set_target_properties(test_long_chat_obj PROPERTIES AUTOMOC ON)
add_dependencies(test_long_chat engram-cli)
# EpiCache in a chat (issue 15): the episode router, routed turns with write-back, the store.
engram_add_test(test_chat_episodes SOURCES test_chat_episodes.cpp LIBS engram_env engram_storage
                TORCH TIMEOUT 900)
set_target_properties(test_chat_episodes_obj PROPERTIES AUTOMOC ON)
# EpiCache's episode caches in the conversation store (issue 15): restore, append-only saves,
# a damaged blob, another model.
engram_add_test(test_episode_kv_store SOURCES test_episode_kv_store.cpp LIBS engram_env
                engram_storage TORCH TIMEOUT 900)
set_target_properties(test_episode_kv_store_obj PROPERTIES AUTOMOC ON)
