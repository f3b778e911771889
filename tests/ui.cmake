# Desktop app suites (offscreen). They include no torch header: the UI sees engine value types.
if(TARGET engram_ui)
  engram_add_test(test_ui_chat SOURCES test_ui_chat.cpp LIBS engram_ui)
  engram_add_test(test_ui_timeline SOURCES test_ui_timeline.cpp LIBS engram_ui)
  engram_add_test(test_ui_window SOURCES test_ui_window.cpp LIBS engram_ui)
  engram_add_test(test_ui_restore SOURCES test_ui_restore.cpp LIBS engram_ui)
endif()
