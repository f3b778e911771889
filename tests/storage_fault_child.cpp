// A child process for the fault suites, so that process-wide conditions (a held profile lock,
// a file size limit) apply to it and not to the test runner.
//
//   storage_fault_child hold PROFILE       open the profile, print "ready <pid>", wait for stdin
//                                          to close
//   storage_fault_child fill PROFILE LIMIT under RLIMIT_FSIZE = LIMIT bytes (SIGXFSZ ignored, so
//                                          writes fail with EFBIG instead of killing us): a blob
//                                          and a transaction larger than the limit must fail
//                                          with StorageFull and leave nothing behind, and the
//                                          store must still take a small write afterwards
//
// Prints one line per check; exits 0 when all held, 1 otherwise.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"
#include "storage/store_error.h"

using namespace engram::storage;
namespace fs = std::filesystem;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::cout << (ok ? "ok: " : "FAILED: ") << what << std::endl;
  if (!ok) ++failures;
}

std::size_t files_in(const fs::path& dir) {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir))
    ++count;
  return count;
}

int hold(const fs::path& profile) {
  Database db(profile);
  std::cout << "ready " << getpid() << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  return 0;
}

int fill(const fs::path& profile, long long limit) {
  signal(SIGXFSZ, SIG_IGN);
  const rlimit size_limit{static_cast<rlim_t>(limit), static_cast<rlim_t>(limit)};
  if (setrlimit(RLIMIT_FSIZE, &size_limit) != 0) {
    std::perror("setrlimit");
    return 1;
  }
  Database db(profile);
  ConversationRepository conversations(db);
  KvBlobStore blobs(db);
  const Conversation fill = *conversations.find_by_name("fill");
  const std::size_t files_before = files_in(db.paths().kv);

  // A blob past the limit: the temporary file hits EFBIG.
  const std::size_t blob_bytes = static_cast<std::size_t>(limit) * 2;
  std::vector<std::byte> data(blob_bytes, std::byte{0x5a});
  try {
    blobs.put({{fill.id, "episode", 0}, 0, 4},
              {"fp32", {static_cast<std::int64_t>(blob_bytes / 4)}, {}}, data, "model");
    check(false, "a blob larger than the file size limit was stored");
  } catch (const StorageFull& e) {
    check(true, std::string("blob: ") + e.what());
    check(std::string(e.what()).find("conversation " + std::to_string(fill.id) + " episode 0") !=
              std::string::npos,
          "the blob error names the unit");
  }
  check(files_in(db.paths().kv) == files_before, "no temporary or partial blob file is left");
  check(!blobs.find({{fill.id, "episode", 0}, 0, 4}), "no blob row is visible");

  // A transaction past the limit: the WAL write fails; everything in it rolls back.
  try {
    Transaction transaction(db, "half-written conversation");
    const Conversation half = conversations.create("half");
    conversations.append(half.id, {0, 0, "user", "small", 0, 0, 1});
    conversations.append(half.id, {0, 0, "user", std::string(blob_bytes, 'y'), 0, 1, 2});
    transaction.commit();
    check(false, "a transaction larger than the file size limit committed");
  } catch (const StorageFull& e) {
    check(true, std::string("transaction: ") + e.what());
  }
  check(!conversations.find_by_name("half"), "the rolled-back conversation is not visible");

  // The failure is not sticky: a small write afterwards commits.
  conversations.append(fill.id, {0, 0, "user", "after", 0, 1, 2});
  check(conversations.utterances(fill.id).back().text == "after", "a small write still works");
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.size() == 2 && args[0] == "hold") return hold(args[1]);
    if (args.size() == 3 && args[0] == "fill") return fill(args[1], std::stoll(args[2]));
  } catch (const std::exception& e) {
    std::cout << "FAILED: unexpected error: " << e.what() << std::endl;
    return 1;
  }
  std::cerr << "usage: storage_fault_child hold PROFILE | fill PROFILE LIMIT_BYTES\n";
  return 2;
}
