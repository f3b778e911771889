# The worlds: household simulator, expert planner, embodied memory and data export. No torch.
engram_add_test(test_household_rules SOURCES test_household_rules.cpp LIBS engram_env)
engram_add_test(test_household_determinism SOURCES test_household_determinism.cpp LIBS engram_env)
engram_add_test(test_expert_planner SOURCES test_expert_planner.cpp LIBS engram_env)
engram_add_test(test_memory_segments SOURCES test_memory_segments.cpp LIBS engram_env)
engram_add_test(test_env_export SOURCES test_env_export.cpp LIBS engram_env)
# Each suite is one QObject in its .cpp (test_x.moc); tests/CMakeLists.txt does not turn AUTOMOC on.
set_target_properties(test_household_rules_obj test_household_determinism_obj
                      test_expert_planner_obj test_memory_segments_obj test_env_export_obj
                      PROPERTIES AUTOMOC ON)
