// Every repository round-trips its values through a closed and reopened profile: conversations
// (create, rename, memory policy, list, search, delete), utterances (append, truncate), memory
// segments (versions bump only on a text change), groups with static/dynamic state, episodes and
// embeddings, in a conversation and in world memory.
#include <QTemporaryDir>
#include <QtTest>

#include <functional>

#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/embedding_repository.h"
#include "storage/episode_repository.h"
#include "storage/memory_repository.h"
#include "storage/sqlite_statement.h"
#include "storage/store_error.h"

using namespace engram::storage;
namespace fs = std::filesystem;

namespace {

template <typename E>
std::pair<bool, QString> thrown(const std::function<void()>& call) {
  try {
    call();
  } catch (const E& e) {
    return {true, QString::fromStdString(e.what())};
  } catch (const std::exception& e) {
    return {false, QStringLiteral("wrong exception: ") + QString::fromUtf8(e.what())};
  }
  return {false, QStringLiteral("nothing thrown")};
}

QStringList names(const std::vector<Conversation>& conversations) {
  QStringList result;
  for (const Conversation& c : conversations)
    result << QString::fromStdString(c.name);
  return result;
}

}  // namespace

class TestStoreRepositories : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  fs::path profile() const { return dir_.path().toStdString(); }

 private Q_SLOTS:
  void init() { QVERIFY(dir_.isValid()); }
  void cleanup() { fs::remove_all(profile()); }

  void conversationsRoundTripThroughReopen() {
    std::int64_t id = 0;
    {
      Database db(profile());
      ConversationRepository conversations(db);
      const Conversation created = conversations.create("Trip to Lisbon", "llama-3-8b@rope500k");
      id = created.id;
      QVERIFY(id > 0);
      QVERIFY(created.created_ms > 0);
      QCOMPARE(created.updated_ms, created.created_ms);
    }
    Database db(profile());
    ConversationRepository conversations(db);
    const Conversation loaded = conversations.load(id);
    QCOMPARE(loaded.name, std::string("Trip to Lisbon"));
    QCOMPARE(loaded.model_fingerprint, std::string("llama-3-8b@rope500k"));
    QCOMPARE(conversations.find_by_name("Trip to Lisbon")->id, id);
    QVERIFY(!conversations.find(id + 100));
    auto [missing, message] = thrown<NotFound>([&] { conversations.load(id + 100); });
    QVERIFY2(missing && message.contains("conversation"), qPrintable(message));
  }

  void conversationNamesAreUnique() {
    Database db(profile());
    ConversationRepository conversations(db);
    const Conversation a = conversations.create("a");
    const Conversation b = conversations.create("b");
    auto [taken, message] = thrown<StoreError>([&] { conversations.create("a"); });
    QVERIFY2(taken && message.contains("already exists"), qPrintable(message));
    auto [rename_taken, rename_message] =
        thrown<StoreError>([&] { conversations.rename(b.id, "a"); });
    QVERIFY2(rename_taken && rename_message.contains("has that name"), qPrintable(rename_message));
    conversations.rename(b.id, "c");
    QCOMPARE(conversations.load(b.id).name, std::string("c"));
    conversations.rename(a.id, "a");  // its own name is not a conflict
    conversations.set_model_fingerprint(a.id, "qwen3@1m");
    QCOMPARE(conversations.load(a.id).model_fingerprint, std::string("qwen3@1m"));
  }

  void memoryPolicyRoundTripsThroughReopenAndIsValidated() {
    std::int64_t id = 0;
    std::int64_t other = 0;
    {
      Database db(profile());
      ConversationRepository conversations(db);
      const Conversation created = conversations.create("policy");
      id = created.id;
      QCOMPARE(created.memory_policy, std::string());  // the app's default
      QCOMPARE(created.kv_budget, 0);                  // the policy's default
      other = conversations.create("untouched").id;
      conversations.set_memory_policy(id, "snapkv:window=64", 1024);
    }
    Database db(profile());
    ConversationRepository conversations(db);
    const Conversation loaded = conversations.load(id);
    QCOMPARE(loaded.memory_policy, std::string("snapkv:window=64"));
    QCOMPARE(loaded.kv_budget, 1024);
    // Every way of reading a conversation carries the two columns.
    QCOMPARE(conversations.find(id)->kv_budget, 1024);
    QCOMPARE(conversations.find_by_name("policy")->memory_policy, std::string("snapkv:window=64"));
    for (const Conversation& c : conversations.list()) {
      QCOMPARE(c.kv_budget, c.id == id ? 1024 : 0);
    }
    QCOMPARE(conversations.search("polic").at(0).memory_policy, std::string("snapkv:window=64"));
    QCOMPARE(conversations.load(other).memory_policy, std::string());

    conversations.set_memory_policy(id, "streaming", 0);  // back to the policy's default budget
    QCOMPARE(conversations.load(id).memory_policy, std::string("streaming"));
    QCOMPARE(conversations.load(id).kv_budget, 0);

    auto [missing, message] =
        thrown<NotFound>([&] { conversations.set_memory_policy(id + 100, "streaming", 64); });
    QVERIFY2(missing && message.contains("conversation"), qPrintable(message));
    auto [negative, negative_message] =
        thrown<StoreError>([&] { conversations.set_memory_policy(id, "streaming", -1); });
    QVERIFY2(negative && negative_message.contains("negative"), qPrintable(negative_message));
    QCOMPARE(conversations.load(id).memory_policy, std::string("streaming"));  // unchanged
    QCOMPARE(conversations.load(id).kv_budget, 0);
  }

  void truncateDropsTheTailAndAppendsContinueAfterIt() {
    std::int64_t id = 0;
    std::int64_t other = 0;
    {
      Database db(profile());
      ConversationRepository conversations(db);
      id = conversations.create("regenerate").id;
      other = conversations.create("neighbour").id;
      for (int i = 0; i < 5; ++i) {
        conversations.append(id, {0, 0, i % 2 ? "assistant" : "user", "turn " + std::to_string(i),
                                  1000 + i, i * 10, i * 10 + 10});
      }
      conversations.append(other, {0, 0, "user", "not mine", 1000, 0, 3});
      // Back-date the conversation so that the touch is visible within the same millisecond.
      db.exec("UPDATE conversations SET updated_ms = 1 WHERE id = " + std::to_string(id));
      conversations.truncate(id, 3);
      QCOMPARE(conversations.utterance_count(id), 3);
      QVERIFY(conversations.load(id).updated_ms > 1);
      const Utterance next = conversations.append(id, {0, 0, "assistant", "again", 0, 30, 42});
      QCOMPARE(next.index, 3);
      db.exec("UPDATE conversations SET updated_ms = 1 WHERE id = " + std::to_string(id));
      conversations.truncate(id, 9);  // past the end: nothing deleted, nothing touched
      QCOMPARE(conversations.utterance_count(id), 4);
      QCOMPARE(conversations.load(id).updated_ms, 1);
    }
    Database db(profile());
    ConversationRepository conversations(db);
    const std::vector<Utterance> all = conversations.utterances(id);
    QCOMPARE(all.size(), std::size_t{4});
    for (std::size_t i = 0; i < all.size(); ++i)
      QCOMPARE(all[i].index, static_cast<std::int64_t>(i));
    QCOMPARE(all[2].text, std::string("turn 2"));
    QCOMPARE(all[3].text, std::string("again"));
    QCOMPARE(conversations.utterances(other).size(), std::size_t{1});

    // In a caller's transaction, a rollback brings the tail back.
    {
      Transaction transaction(db, "test");
      conversations.truncate(id, 0);
      QCOMPARE(conversations.utterance_count(id), 0);
    }
    QCOMPARE(conversations.utterance_count(id), 4);
    conversations.truncate(id, 0);
    QCOMPARE(conversations.append(id, {0, 0, "user", "fresh", 0, 0, 2}).index, 0);

    auto [missing, message] = thrown<NotFound>([&] { conversations.truncate(id + 100, 0); });
    QVERIFY2(missing, qPrintable(message));
    auto [negative, negative_message] = thrown<StoreError>([&] { conversations.truncate(id, -1); });
    QVERIFY2(negative, qPrintable(negative_message));
    QCOMPARE(conversations.utterance_count(id), 1);
  }

  void utterancesAppendInOrderAndRoundTrip() {
    std::int64_t id = 0;
    {
      Database db(profile());
      ConversationRepository conversations(db);
      id = conversations.create("chat").id;
      const Utterance first =
          conversations.append(id, {0, 0, "system", "You are Engram.", 1000, 0, 5});
      QCOMPARE(first.index, 0);
      QCOMPARE(first.conversation_id, id);
      const Utterance second = conversations.append(id, {0, 0, "user", "Hällo ✓", 0, 5, 9});
      QCOMPARE(second.index, 1);
      QVERIFY(second.time_ms > 1000);  // 0 means now
      conversations.append(id, {0, 0, "assistant", std::string(5000, 'x'), 3000, 9, 1300});
    }
    Database db(profile());
    ConversationRepository conversations(db);
    QCOMPARE(conversations.utterance_count(id), 3);
    const std::vector<Utterance> all = conversations.utterances(id);
    QCOMPARE(all.size(), std::size_t{3});
    QCOMPARE(all[0].role, std::string("system"));
    QCOMPARE(all[0].text, std::string("You are Engram."));
    QCOMPARE(all[0].time_ms, 1000);
    QCOMPARE(all[1].text, std::string("Hällo ✓"));
    QCOMPARE(all[1].token_begin, 5);
    QCOMPARE(all[1].token_end, 9);
    QCOMPARE(all[2].text.size(), std::size_t{5000});
    const std::vector<Utterance> tail = conversations.utterances(id, 1, 1);
    QCOMPARE(tail.size(), std::size_t{1});
    QCOMPARE(tail[0].index, 1);
    QVERIFY(conversations.load(id).updated_ms >= all[1].time_ms);
    auto [missing, message] = thrown<NotFound>([&] {
      conversations.append(id + 9, {0, 0, "user", "x", 0, 0, 0});
    });
    QVERIFY2(missing, qPrintable(message));
  }

  void listShowsMostRecentlyUpdatedFirstAndSearchFindsNamesAndText() {
    Database db(profile());
    ConversationRepository conversations(db);
    const Conversation recipes = conversations.create("Recipes");
    const Conversation work = conversations.create("Work notes");
    const Conversation percent = conversations.create("Budget");
    conversations.append(recipes.id, {0, 0, "user", "how long to bake sourdough?", 5000, 0, 6});
    conversations.append(work.id, {0, 0, "user", "the deploy is at noon", 6000, 0, 5});
    conversations.append(percent.id, {0, 0, "user", "we spent 50% of it", 7000, 0, 5});
    QCOMPARE(names(conversations.list()), (QStringList{"Budget", "Work notes", "Recipes"}));
    QCOMPARE(names(conversations.search("SOURDOUGH")), QStringList{"Recipes"});
    QCOMPARE(names(conversations.search("work")), QStringList{"Work notes"});
    QCOMPARE(names(conversations.search("50%")), QStringList{"Budget"});
    QCOMPARE(names(conversations.search("5_%")), QStringList{});  // wildcards are literal
    QCOMPARE(names(conversations.search("e")).size(), 3);
  }

  void segmentVersionBumpsOnlyWhenTextChanges() {
    std::int64_t conversation = 0;
    {
      Database db(profile());
      conversation = ConversationRepository(db).create("room").id;
      MemoryRepository memory(db);
      const MemorySegment first = memory.upsert_segment(conversation, "object", "cup", "a cup", 3);
      QCOMPARE(first.version, 1);
      QCOMPARE(first.changed_step, 3);
      const MemorySegment same = memory.upsert_segment(conversation, "object", "cup", "a cup", 9);
      QCOMPARE(same.id, first.id);
      QCOMPARE(same.version, 1);
      QCOMPARE(same.changed_step, 3);
      const MemorySegment moved =
          memory.upsert_segment(conversation, "object", "cup", "a cup on the table", 12);
      QCOMPARE(moved.id, first.id);
      QCOMPARE(moved.version, 2);
      QCOMPARE(moved.changed_step, 12);
      memory.upsert_segment(std::nullopt, "fact", "cup", "cups hold liquids", 1);  // world
    }
    Database db(profile());
    MemoryRepository memory(db);
    const MemorySegment loaded = *memory.find_segment(conversation, "cup");
    QCOMPARE(loaded.text, std::string("a cup on the table"));
    QCOMPARE(loaded.kind, std::string("object"));
    QCOMPARE(loaded.version, 2);
    QCOMPARE(loaded.changed_step, 12);
    QCOMPARE(memory.load_segment(loaded.id).key, std::string("cup"));
    const MemorySegment world = *memory.find_segment(std::nullopt, "cup");
    QVERIFY(!world.conversation_id);
    QCOMPARE(world.text, std::string("cups hold liquids"));
    QCOMPARE(memory.segments(conversation).size(), std::size_t{1});
    QCOMPARE(memory.segments(std::nullopt).size(), std::size_t{1});
    memory.remove_segment(loaded.id);
    QVERIFY(!memory.find_segment(conversation, "cup"));
  }

  void groupsKeepStateAndOrderedMembers() {
    std::int64_t conversation = 0;
    std::vector<std::int64_t> segment_ids;
    {
      Database db(profile());
      conversation = ConversationRepository(db).create("kitchen").id;
      MemoryRepository memory(db);
      for (const char* key : {"sink", "stove", "fridge"}) {
        segment_ids.push_back(memory.upsert_segment(conversation, "object", key, key, 0).id);
      }
      const MemoryGroup saved = memory.save_group(
          {0, conversation, "appliances", GroupState::kStatic, {segment_ids[2], segment_ids[1]}});
      QVERIFY(saved.id > 0);
      const MemoryGroup resaved = memory.save_group(
          {0, conversation, "appliances", GroupState::kDynamic, {segment_ids[0], segment_ids[2]}});
      QCOMPARE(resaved.id, saved.id);
      memory.save_group({0, std::nullopt, "everywhere", GroupState::kStatic, {}});
    }
    Database db(profile());
    MemoryRepository memory(db);
    MemoryGroup group = *memory.find_group(conversation, "appliances");
    QCOMPARE(group.state, GroupState::kDynamic);
    QCOMPARE(group.segment_ids, (std::vector<std::int64_t>{segment_ids[0], segment_ids[2]}));
    memory.set_group_state(group.id, GroupState::kStatic);
    QCOMPARE(memory.groups(conversation).at(0).state, GroupState::kStatic);
    QCOMPARE(memory.groups(std::nullopt).at(0).key, std::string("everywhere"));
    // Removing a member segment removes its membership, not the group.
    memory.remove_segment(segment_ids[0]);
    QCOMPARE(memory.find_group(conversation, "appliances")->segment_ids,
             std::vector<std::int64_t>{segment_ids[2]});
    memory.remove_group(group.id);
    QVERIFY(!memory.find_group(conversation, "appliances"));
  }

  void episodesRoundTripAndKeepTheirIdWhenSavedAgain() {
    std::int64_t conversation = 0;
    std::int64_t episode_id = 0;
    std::vector<std::int64_t> segments;
    {
      Database db(profile());
      conversation = ConversationRepository(db).create("long chat").id;
      MemoryRepository memory(db);
      for (int i = 0; i < 4; ++i) {
        segments.push_back(
            memory.upsert_segment(conversation, "block", "b" + std::to_string(i), "t", 0).id);
      }
      EpisodeRepository episodes(db);
      const Episode first = episodes.save({0,
                                           conversation,
                                           0,
                                           {0.5f, -1.25f, 3.0f},
                                           segments[1],
                                           {64, 64, 32},
                                           {segments[0], segments[1]}});
      episode_id = first.id;
      const Episode again = episodes.save({0,
                                           conversation,
                                           0,
                                           {1.0f, 2.0f, 3.0f, 4.0f},
                                           segments[3],
                                           {128, 96},
                                           {segments[3], segments[2]}});
      QCOMPARE(again.id, episode_id);
      episodes.save({0, conversation, 1, {}, std::nullopt, {}, {}});
    }
    Database db(profile());
    EpisodeRepository episodes(db);
    const std::vector<Episode> all = episodes.list(conversation);
    QCOMPARE(all.size(), std::size_t{2});
    const Episode& loaded = all[0];
    QCOMPARE(loaded.id, episode_id);
    QCOMPARE(loaded.centroid, (std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}));
    QCOMPARE(*loaded.medoid_segment_id, segments[3]);
    QCOMPARE(loaded.layer_budget, (std::vector<std::int64_t>{128, 96}));
    QCOMPARE(loaded.segment_ids, (std::vector<std::int64_t>{segments[3], segments[2]}));
    QVERIFY(all[1].centroid.empty());
    QVERIFY(!all[1].medoid_segment_id);
    // The medoid is a reference, not an owner: removing the segment clears it.
    MemoryRepository(db).remove_segment(segments[3]);
    const Episode after = *episodes.find(conversation, 0);
    QVERIFY(!after.medoid_segment_id);
    QCOMPARE(after.segment_ids, std::vector<std::int64_t>{segments[2]});
    episodes.remove(episode_id);
    QVERIFY(!episodes.find(conversation, 0));
  }

  void embeddingsRoundTripPerOwnerAndModel() {
    std::int64_t conversation = 0;
    {
      Database db(profile());
      conversation = ConversationRepository(db).create("e").id;
      EmbeddingRepository embeddings(db);
      embeddings.put({{conversation, "segment", 7}, "minilm", {0.1f, 0.2f}});
      embeddings.put({{conversation, "segment", 7}, "minilm", {0.3f, 0.4f, 0.5f}});  // replaces
      embeddings.put({{conversation, "segment", 7}, "bge", {9.0f}});
      embeddings.put({{conversation, "episode", 1}, "minilm", {1.0f}});
      embeddings.put({{std::nullopt, "segment", 7}, "minilm", {-1.0f}});
    }
    Database db(profile());
    EmbeddingRepository embeddings(db);
    QCOMPARE(embeddings.find({conversation, "segment", 7}, "minilm")->vector,
             (std::vector<float>{0.3f, 0.4f, 0.5f}));
    QCOMPARE(embeddings.find({conversation, "segment", 7}, "bge")->vector,
             std::vector<float>{9.0f});
    QCOMPARE(embeddings.find({std::nullopt, "segment", 7}, "minilm")->vector,
             std::vector<float>{-1.0f});
    QCOMPARE(embeddings.list(conversation, "minilm").size(), std::size_t{2});
    QVERIFY(embeddings.remove({conversation, "segment", 7}, "bge"));
    QVERIFY(!embeddings.find({conversation, "segment", 7}, "bge"));
    QVERIFY(!embeddings.remove({conversation, "segment", 7}, "bge"));
  }

  void deletingAConversationRemovesAllItOwnsAndNothingElse() {
    Database db(profile());
    ConversationRepository conversations(db);
    MemoryRepository memory(db);
    EpisodeRepository episodes(db);
    EmbeddingRepository embeddings(db);
    const Conversation doomed = conversations.create("doomed");
    const Conversation kept = conversations.create("kept");
    for (const Conversation& c : {doomed, kept}) {
      conversations.append(c.id, {0, 0, "user", "hi", 0, 0, 1});
      const MemorySegment s = memory.upsert_segment(c.id, "k", "s", "t", 0);
      memory.save_group({0, c.id, "g", GroupState::kDynamic, {s.id}});
      episodes.save({0, c.id, 0, {1.0f}, s.id, {1}, {s.id}});
      embeddings.put({{c.id, "segment", s.id}, "m", {1.0f}});
    }
    memory.upsert_segment(std::nullopt, "fact", "w", "world", 0);
    conversations.remove(doomed.id);
    QVERIFY(!conversations.find(doomed.id));
    QVERIFY(conversations.utterances(doomed.id).empty());
    QVERIFY(memory.segments(doomed.id).empty());
    QVERIFY(memory.groups(doomed.id).empty());
    QVERIFY(episodes.list(doomed.id).empty());
    QVERIFY(embeddings.list(doomed.id, "m").empty());
    QCOMPARE(conversations.utterances(kept.id).size(), std::size_t{1});
    QCOMPARE(memory.groups(kept.id).at(0).segment_ids.size(), std::size_t{1});
    QCOMPARE(episodes.list(kept.id).size(), std::size_t{1});
    QCOMPARE(embeddings.list(kept.id, "m").size(), std::size_t{1});
    QCOMPARE(memory.segments(std::nullopt).size(), std::size_t{1});
    QVERIFY(db.integrity_problems().empty());
    auto [missing, message] = thrown<NotFound>([&] { conversations.remove(doomed.id); });
    QVERIFY2(missing, qPrintable(message));
  }

  void callerTransactionMakesSeveralWritesAtomic() {
    Database db(profile());
    ConversationRepository conversations(db);
    MemoryRepository memory(db);
    {
      Transaction transaction(db, "test");
      const Conversation c = conversations.create("all or nothing");
      conversations.append(c.id, {0, 0, "user", "hi", 0, 0, 1});
      memory.upsert_segment(c.id, "k", "s", "t", 0);
      // no commit: everything above must vanish
    }
    QVERIFY(!conversations.find_by_name("all or nothing"));
    Statement segments(db, "SELECT count(*) FROM memory_segments");
    QVERIFY(segments.step());
    QCOMPARE(segments.int64(0), 0);
    {
      Transaction transaction(db, "test");
      const Conversation c = conversations.create("all");
      conversations.append(c.id, {0, 0, "user", "hi", 0, 0, 1});
      transaction.commit();
    }
    QCOMPARE(conversations.utterances(conversations.find_by_name("all")->id).size(),
             std::size_t{1});
  }
};

QTEST_MAIN(TestStoreRepositories)
#include "test_store_repositories.moc"
