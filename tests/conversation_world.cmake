# World 2: the conversation generator, its questions and gold answers, the JSONL format, the
# prompt format and the QA metrics. No torch.
engram_add_test(test_conversation_generator SOURCES test_conversation_generator.cpp LIBS engram_env)
engram_add_test(test_conversation_format SOURCES test_conversation_format.cpp LIBS engram_env)
engram_add_test(test_conversation_jsonl SOURCES test_conversation_jsonl.cpp LIBS engram_env)
engram_add_test(test_conversation_qa_metrics SOURCES test_conversation_qa_metrics.cpp
                LIBS engram_env)
# Each suite is one QObject in its .cpp (test_x.moc).
set_target_properties(test_conversation_generator_obj test_conversation_format_obj
                      test_conversation_jsonl_obj test_conversation_qa_metrics_obj
                      PROPERTIES AUTOMOC ON)
