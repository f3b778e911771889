# KEEP static/dynamic memory groups (issue 16, §4.1): the grouping state machine, unit-level
# retrieval and the household's group units (app/cli/keep_household.cpp is compiled in).
engram_add_test(test_keep_grouping SOURCES test_keep_grouping.cpp
                ${PROJECT_SOURCE_DIR}/app/cli/keep_household.cpp LIBS engram_env TORCH)
set_target_properties(test_keep_grouping_obj PROPERTIES AUTOMOC ON)
