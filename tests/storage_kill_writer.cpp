// The victim of the kill test: writes conversations, utterances, memory segments and KV blobs
// in a loop until it is killed, and appends one line to LOG only after each transaction has
// committed, so every logged line is a promise the store must keep after a SIGKILL:
//
//   C <conversation> <name>                      created, with utterance 0 and segment "init"
//                                                in the same transaction
//   U <conversation> <index> <xxh64 of text>     utterance appended
//   S <conversation> <key> <version> <xxh64>     segment upserted
//   B <conversation> <unit> <layer_begin> <layer_end> <generation> <checksum>
//                                                blob stored; positions[0] holds the generation
//   D? <conversation> / D <conversation>         before / after a delete
//   R <conversation> <stored_end> <checksum>     KV runs saved (save_kv below); the checksum
//                                                is the new manifest's
//
//   storage_kill_writer PROFILE LOG SEED
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"
#include "storage/memory_repository.h"
#include "storage/xxh64.h"

using namespace engram::storage;

namespace {

constexpr std::size_t kMaxConversations = 8;
const std::string kModel = "kill-test-model";

// The engine's append-only KV layout (core/engine/conversation_store.h), reduced to what the
// store sees: "kv_run" blobs whose unit id is their first token and whose positions are their
// tokens, and one "kv_manifest" blob, replaced by every save, whose positions hold the stored
// end. Runs are token-major fp16 [tokens, 2, 16], so the first part of a run is a prefix of its
// bytes; each token's first 8 bytes are its index, so a reader can tell a run's bytes belong to
// its positions. The manifest's bytes are int64 {stored end, checksum of the manifest it
// replaced, generation}: the chain lets a reader tell "one save after the one logged" from any
// other state.
constexpr std::int32_t kKvLayers = 4;
constexpr std::int64_t kKvTokenBytes = 2 * 16 * 2;
constexpr const char* kRunKind = "kv_run";
constexpr const char* kManifestKind = "kv_manifest";

std::uint64_t hash(const std::string& text) {
  return xxh64(std::as_bytes(std::span(text.data(), text.size())));
}

// One write(2) per line: a kill cannot leave half a line, and the page cache survives SIGKILL,
// so the log needs no fsync.
void log_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) std::abort();
}

std::string text_of(std::mt19937_64& random, const std::string& prefix) {
  // Lengths up to 6000 characters spill into overflow pages half of the time.
  std::string text = prefix + " ";
  const std::size_t length = random() % 6000;
  for (std::size_t i = 0; i < length; ++i)
    text += static_cast<char>('a' + random() % 26);
  return text;
}

// One save: an optional cut back to an earlier token count, a new run after the stored end and
// the manifest's replacement, in one transaction. Returns the new manifest's record.
KvBlobRecord save_kv(Database& db, KvBlobStore& blobs, std::int64_t id, std::mt19937_64& random,
                     std::uint64_t generation) {
  Transaction transaction(db, "KV save of conversation " + std::to_string(id));
  const KvBlobKey manifest_key{{id, kManifestKind, 0}, 0, kKvLayers};
  const std::optional<KvBlobRecord> manifest = blobs.find(manifest_key);
  std::int64_t end = manifest ? manifest->layout.positions.at(0) : 0;
  if (end > 0 && random() % 8 == 0) {
    // Cut to c < end: runs from c on go, a run across c keeps its first part under its key.
    const std::int64_t cut = static_cast<std::int64_t>(random() % static_cast<std::uint64_t>(end));
    for (const KvBlobRecord& run : blobs.list(id)) {
      if (run.key.unit.kind != kRunKind) continue;
      const std::int64_t begin = run.key.unit.id;
      const auto tokens = static_cast<std::int64_t>(run.layout.positions.size());
      if (begin >= cut) {
        blobs.remove(run.key);
      } else if (begin + tokens > cut) {
        KvBlobStore::Blob old = blobs.get(run.key, kModel);
        const std::int64_t kept = cut - begin;
        old.data.resize(static_cast<std::size_t>(kept * kKvTokenBytes));
        old.record.layout.shape = {kept, 2, 16};
        old.record.layout.positions.resize(static_cast<std::size_t>(kept));
        blobs.put(run.key, old.record.layout, old.data, kModel);
      }
    }
    end = cut;
  }

  const std::int64_t tokens = 1 + static_cast<std::int64_t>(random() % 48);
  std::vector<std::byte> data(static_cast<std::size_t>(tokens * kKvTokenBytes));
  std::vector<std::int64_t> positions(static_cast<std::size_t>(tokens));
  std::uint64_t state = generation;
  for (std::int64_t t = 0; t < tokens; ++t) {
    positions[static_cast<std::size_t>(t)] = end + t;
    std::byte* token = data.data() + t * kKvTokenBytes;
    const std::int64_t index = end + t;
    std::memcpy(token, &index, sizeof index);
    for (std::int64_t i = sizeof index; i < kKvTokenBytes; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      token[i] = static_cast<std::byte>(state >> 56);
    }
  }
  blobs.put({{id, kRunKind, end}, 0, kKvLayers}, {"fp16", {tokens, 2, 16}, positions}, data,
            kModel);

  const std::int64_t manifest_words[3] = {
      end + tokens, manifest ? static_cast<std::int64_t>(manifest->checksum) : 0,
      static_cast<std::int64_t>(generation)};
  const KvBlobRecord record = blobs.put(
      manifest_key, {"uint8", {static_cast<std::int64_t>(sizeof manifest_words)}, {end + tokens}},
      std::as_bytes(std::span(manifest_words)), kModel);
  transaction.commit();
  return record;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: storage_kill_writer PROFILE LOG SEED\n";
    return 2;
  }
  const std::uint64_t seed = std::stoull(argv[3]);
  std::mt19937_64 random(seed);
  const int log = ::open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return 3;

  Database db(argv[1]);
  ConversationRepository conversations(db);
  MemoryRepository memory(db);
  KvBlobStore blobs(db);

  std::vector<std::int64_t> ids;
  for (const Conversation& c : conversations.list())
    ids.push_back(c.id);
  std::sort(ids.begin(), ids.end());  // oldest first
  std::uint64_t generation = seed << 20;

  for (std::uint64_t step = 0;; ++step) {
    const unsigned choice = random() % 100;
    // Deletes keep the profile at most kMaxConversations big, so each check after a kill costs
    // about the same however many kills came before.
    if ((choice < 10 && ids.size() >= kMaxConversations) || (choice >= 96 && ids.size() > 2)) {
      const std::int64_t oldest = ids.front();
      log_line(log, "D? " + std::to_string(oldest));
      conversations.remove(oldest);
      ids.erase(ids.begin());
      log_line(log, "D " + std::to_string(oldest));
      continue;
    }
    if (ids.empty() || choice < 10) {
      const std::string name = "k" + std::to_string(seed) + "-" + std::to_string(step);
      const std::string first = text_of(random, "system prompt of " + name);
      const std::string init = "initial memory of " + name;
      Transaction transaction(db, "new conversation");
      const Conversation c = conversations.create(name, kModel);
      conversations.append(c.id, {0, 0, "system", first, 0, 0, 10});
      memory.upsert_segment(c.id, "init", "init", init, 0);
      transaction.commit();
      ids.push_back(c.id);
      log_line(log, "C " + std::to_string(c.id) + " " + name);
      log_line(log, "U " + std::to_string(c.id) + " 0 " + std::to_string(hash(first)));
      log_line(log, "S " + std::to_string(c.id) + " init 1 " + std::to_string(hash(init)));
      continue;
    }
    const std::int64_t id = ids[random() % ids.size()];
    if (choice < 40) {
      const std::string text = text_of(random, "utterance " + std::to_string(step));
      const Utterance u = conversations.append(id, {0, 0, "user", text, 0, 0, 0});
      log_line(log, "U " + std::to_string(id) + " " + std::to_string(u.index) + " " +
                        std::to_string(hash(text)));
    } else if (choice < 60) {
      const std::string key = "k" + std::to_string(random() % 4);
      const std::string text = text_of(random, "segment " + key);
      const MemorySegment s = memory.upsert_segment(id, "object", key, text, step);
      log_line(log, "S " + std::to_string(id) + " " + key + " " + std::to_string(s.version) + " " +
                        std::to_string(hash(text)));
    } else if (choice < 78) {
      const std::int64_t unit = random() % 3;
      const std::int32_t layer_begin = (random() % 2) * 4;
      const std::int64_t tokens = 1 + random() % 256;  // up to 128 KiB of fp16
      std::vector<std::byte> data(static_cast<std::size_t>(2 * tokens * 128 * 2));
      std::uint64_t state = ++generation;
      for (std::byte& b : data) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        b = static_cast<std::byte>(state >> 56);
      }
      std::vector<std::int64_t> positions(static_cast<std::size_t>(tokens));
      positions[0] = static_cast<std::int64_t>(generation);
      const KvBlobRecord record = blobs.put({{id, "episode", unit}, layer_begin, layer_begin + 4},
                                            {"fp16", {2, tokens, 128}, positions}, data, kModel);
      log_line(log, "B " + std::to_string(id) + " " + std::to_string(unit) + " " +
                        std::to_string(layer_begin) + " " + std::to_string(layer_begin + 4) + " " +
                        std::to_string(generation) + " " + std::to_string(record.checksum));
    } else {
      const KvBlobRecord manifest = save_kv(db, blobs, id, random, ++generation);
      log_line(log, "R " + std::to_string(id) + " " +
                        std::to_string(manifest.layout.positions.at(0)) + " " +
                        std::to_string(manifest.checksum));
    }
  }
}
