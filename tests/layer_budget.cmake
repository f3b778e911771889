# Sensitivity-aware layer budgets (issue 15, EpiCache §3.2): the budget arithmetic and the stored
# calibration file, built without torch (layer_budget.cpp is compiled in), and the key-cosine
# measurement on fixture models.
engram_add_test(test_layer_budget SOURCES test_layer_budget.cpp
                ${PROJECT_SOURCE_DIR}/core/policies/layer_budget.cpp LIBS engram_storage)
engram_add_test(test_layer_sensitivity SOURCES test_layer_sensitivity.cpp TORCH)
