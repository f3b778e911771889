# The bundled default model (resources/models/engram-tiny) through the normal loader, on the CPU.
engram_add_test(test_bundled_model SOURCES test_bundled_model.cpp LIBS engram_env TORCH TIMEOUT 600)
set_target_properties(test_bundled_model_obj PROPERTIES AUTOMOC ON)
