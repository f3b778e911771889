# Tokenizer, streaming detokenization, chat templates and stop strings. No torch.
engram_add_test(test_tokenizer SOURCES test_tokenizer.cpp LIBS engram_tokenizer)
engram_add_test(test_tokenizer_json SOURCES test_tokenizer_json.cpp LIBS engram_tokenizer)
engram_add_test(test_token_stream SOURCES test_token_stream.cpp LIBS engram_tokenizer)
engram_add_test(test_chat_template SOURCES test_chat_template.cpp LIBS engram_tokenizer)
engram_add_test(test_chat_template_families SOURCES test_chat_template_families.cpp
                LIBS engram_tokenizer)
# Each suite is one QObject in its .cpp (test_x.moc); tests/CMakeLists.txt does not turn AUTOMOC on.
set_target_properties(test_tokenizer_obj test_tokenizer_json_obj test_token_stream_obj test_chat_template_obj
                      test_chat_template_families_obj
                      PROPERTIES AUTOMOC ON)
# The one suite here with torch: a model folder with only tokenizer.json, chatted with on the CPU.
engram_add_test(test_tokenizer_json_chat SOURCES test_tokenizer_json_chat.cpp TORCH TIMEOUT 300)
set_target_properties(test_tokenizer_json_chat_obj PROPERTIES AUTOMOC ON)
