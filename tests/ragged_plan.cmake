# Ragged keep plans (issue 15): per-head validity in attention, EpiCache's joint head-wise
# selection and layer budgets, the store's empty slots.
engram_add_test(test_ragged_plan SOURCES test_ragged_plan.cpp LIBS engram_storage TORCH)
