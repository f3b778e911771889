# Conversations in the store (issue 4, "restore without re-prefill"): a ChatSession saved with
# its KV comes back without re-prefill; another model's or a damaged blob is rebuilt from text;
# engram-cli chat --conversation resumes across processes.
engram_add_test(test_conversation_restore SOURCES test_conversation_restore.cpp
                LIBS engram_storage TORCH)
add_dependencies(test_conversation_restore engram-cli)
