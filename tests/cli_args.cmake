# The CLI's flag parsing (CLI11 behind engram::cli::Args); no torch.
engram_add_test(test_cli_args SOURCES test_cli_args.cpp ${PROJECT_SOURCE_DIR}/app/cli/cli_args.cpp)
target_include_directories(test_cli_args_obj PRIVATE ${PROJECT_SOURCE_DIR})
