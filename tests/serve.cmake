# engram-cli serve (issue 19): the OpenAI protocol part alone (bodies -> requests and errors),
# then the real server on the bundled model through curl and through the official openai npm
# client.
engram_add_test(test_openai_protocol
                SOURCES test_openai_protocol.cpp ${PROJECT_SOURCE_DIR}/app/cli/openai_protocol.cpp
                LIBS engram_log)
if(NOT ENGRAM_BUILD_SERVE)
  return()  # engram-cli was built without serve (app/cli/CMakeLists.txt)
endif()
find_package(Python3 COMPONENTS Interpreter)
find_program(ENGRAM_CURL curl)
if(NOT Python3_Interpreter_FOUND OR NOT ENGRAM_CURL)
  message(WARNING "python3 or curl not found: the engram-cli serve tests are not run")
  return()
endif()
add_test(NAME test_serve_http
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_serve_http.py
                 $<TARGET_FILE:engram-cli> ${PROJECT_SOURCE_DIR}/resources/models/engram-tiny)
set_tests_properties(test_serve_http PROPERTIES TIMEOUT 600)
add_test(NAME test_serve_openai_client
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_serve_openai_client.sh
                 $<TARGET_FILE:engram-cli> ${PROJECT_SOURCE_DIR}/resources/models/engram-tiny
                 ${PROJECT_BINARY_DIR}/serve-npm)
set_tests_properties(test_serve_openai_client PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77)
