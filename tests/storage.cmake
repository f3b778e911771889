# The persistent store (storage/): schema and migrations, repositories, KV blob files, and the
# faults of issue 4 (kill, corruption, disk full, two processes). No torch.
set(ENGRAM_STORE_SUITES checksum schema repositories blobs concurrency corruption disk_full kill)
foreach(suite ${ENGRAM_STORE_SUITES})
  engram_add_test(test_store_${suite} SOURCES test_store_${suite}.cpp LIBS engram_storage
                  TIMEOUT 900)
  # Each suite is one QObject in its .cpp (test_x.moc).
  set_target_properties(test_store_${suite}_obj PROPERTIES AUTOMOC ON)
endforeach()

# Child programs the fault suites start, kill and wait for.
add_executable(storage_kill_writer storage_kill_writer.cpp)
target_link_libraries(storage_kill_writer PRIVATE engram_storage)
add_executable(storage_fault_child storage_fault_child.cpp)
target_link_libraries(storage_fault_child PRIVATE engram_storage)

foreach(suite concurrency disk_full kill)
  target_compile_definitions(test_store_${suite}_obj PRIVATE
    ENGRAM_STORAGE_KILL_WRITER="$<TARGET_FILE:storage_kill_writer>"
    ENGRAM_STORAGE_FAULT_CHILD="$<TARGET_FILE:storage_fault_child>")
  add_dependencies(test_store_${suite} storage_kill_writer storage_fault_child)
endforeach()
