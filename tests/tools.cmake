# The training tools' data steps (tools/*.py) on data exported by engram-cli: what they write is
# what the model learns, so their answers are checked against the histories they come with.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME test_recall_drills
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_recall_drills.py
                   $<TARGET_FILE:engram-cli> ${PROJECT_SOURCE_DIR}/tools)
  set_tests_properties(test_recall_drills PROPERTIES TIMEOUT 120)
else()
  message(WARNING "python3 not found: test_recall_drills is not run")
endif()
if(Python3_Interpreter_FOUND)
  add_test(NAME test_trainer_batches
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_trainer_batches.py
                   ${PROJECT_SOURCE_DIR}/tools)
  set_tests_properties(test_trainer_batches PROPERTIES TIMEOUT 120)
endif()
if(Python3_Interpreter_FOUND)
  add_test(NAME test_average_models
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_average_models.py
                   ${PROJECT_SOURCE_DIR}/tools)
  set_tests_properties(test_average_models PROPERTIES TIMEOUT 60)
endif()
