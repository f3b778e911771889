# Model folders without torch: safetensors files and shards, config.json dialects, named shapes.
engram_add_test(test_safetensors SOURCES test_safetensors.cpp LIBS engram_model)
engram_add_test(test_model_config SOURCES test_model_config.cpp LIBS engram_model)
# Each suite is one QObject in its .cpp (test_x.moc); tests/CMakeLists.txt does not turn AUTOMOC on.
set_target_properties(test_safetensors_obj test_model_config_obj PROPERTIES AUTOMOC ON)
