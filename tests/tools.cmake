# The training tools' data steps (tools/*.py) on data exported by engram-cli: what they write is
# what the model learns, so their answers are checked against the histories they come with.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(WARNING "python3 not found: the training tools' tests (tests/tools) are not run")
  return()
endif()

# engram_tool_test(NAME TIMEOUT ARGS...): tests/tools/NAME.py run with ARGS.
function(engram_tool_test name timeout)
  add_test(NAME ${name}
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tools/${name}.py ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${timeout})
endfunction()

engram_tool_test(test_recall_drills 120 $<TARGET_FILE:engram-cli> ${PROJECT_SOURCE_DIR}/tools)
engram_tool_test(test_trainer_batches 120 ${PROJECT_SOURCE_DIR}/tools)
engram_tool_test(test_average_models 60 ${PROJECT_SOURCE_DIR}/tools)
engram_tool_test(test_train_chain 60 ${PROJECT_SOURCE_DIR}/tools)
