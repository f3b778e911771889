# engram-cli bench epicache (issue 15, EpiCache Table 3) on the bundled model with small numbers:
# every method runs and is timed, the stage counts add up, EpiCache's peak memory is below full
# KV's, the sweep has its rows (tests/test_bench_epicache.py).
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(WARNING "python3 not found: test_bench_epicache is not run")
  return()
endif()
add_test(NAME test_bench_epicache
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_bench_epicache.py
                 $<TARGET_FILE:engram-cli> ${PROJECT_SOURCE_DIR}/resources/models/engram-tiny)
set_tests_properties(test_bench_epicache PROPERTIES TIMEOUT 300)
