# OxyGen (issue 18): generation states, batched ragged decode, the frame loop and the household
# frames (app/cli/oxygen_household.cpp is compiled in: the CLI's world, tested without the CLI).
engram_add_test(test_oxygen SOURCES test_oxygen.cpp ${PROJECT_SOURCE_DIR}/app/cli/oxygen_household.cpp
                LIBS engram_env TORCH TIMEOUT 600)
set_target_properties(test_oxygen_obj PROPERTIES AUTOMOC ON)
