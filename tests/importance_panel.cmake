# The importance-propagation panel (issue 16, "Panel"): the recompute trace engram-cli eval keep
# --trace writes (no torch header: the trace is plain data) and the panel that reads it
# (offscreen).
engram_add_test(test_recompute_trace SOURCES test_recompute_trace.cpp LIBS engram_core TIMEOUT 60)
if(TARGET engram_ui)
  engram_add_test(test_ui_importance SOURCES test_ui_importance.cpp LIBS engram_ui TIMEOUT 60)
endif()
