# Conversation export and import (issue 19): the JSON and Markdown formats and the import's
# checks through real profiles. No torch.
engram_add_test(test_conversation_export SOURCES test_conversation_export.cpp LIBS engram_storage)
set_target_properties(test_conversation_export_obj PROPERTIES AUTOMOC ON)
# The app's File → Export/Import actions with the fixture model (offscreen).
if(TARGET engram_ui)
  engram_add_test(test_ui_export SOURCES test_ui_export.cpp LIBS engram_ui)
endif()
# engram-cli export chat / import chat, and chat continuing an imported conversation.
engram_add_test(test_cli_chat_file SOURCES test_cli_chat_file.cpp LIBS engram_storage)
set_target_properties(test_cli_chat_file_obj PROPERTIES AUTOMOC ON)
add_dependencies(test_cli_chat_file engram-cli)
