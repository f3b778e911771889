# The EpiCache episodes panel (issue 15, "Panel"): the episode trace engram-cli eval conversation
# --episodes-trace writes (no torch header: the trace is plain data) and the panel that reads it
# (offscreen).
engram_add_test(test_episode_trace SOURCES test_episode_trace.cpp LIBS engram_core TIMEOUT 60)
if(TARGET engram_ui)
  engram_add_test(test_ui_episodes SOURCES test_ui_episodes.cpp LIBS engram_ui TIMEOUT 60)
endif()
