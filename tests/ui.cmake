# Desktop app suites (offscreen). They include no torch header: the UI sees engine value types.
if(TARGET engram_ui)
  engram_add_test(test_ui_chat SOURCES test_ui_chat.cpp LIBS engram_ui)
  engram_add_test(test_ui_timeline SOURCES test_ui_timeline.cpp LIBS engram_ui)
  engram_add_test(test_ui_window SOURCES test_ui_window.cpp LIBS engram_ui)
  engram_add_test(test_ui_restore SOURCES test_ui_restore.cpp LIBS engram_ui)
  # Where a streamed answer is cut: the helper alone, with Qt's Markdown importer, no torch.
  engram_add_test(test_ui_markdown_split
                  SOURCES test_ui_markdown_split.cpp ${PROJECT_SOURCE_DIR}/ui/markdown_stream_split.cpp
                  LIBS Qt6::Gui TIMEOUT 120)
  target_include_directories(test_ui_markdown_split_obj PRIVATE ${PROJECT_SOURCE_DIR})
endif()
