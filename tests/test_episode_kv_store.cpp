// EpiCache's episode caches in the conversation store (issue 15; core/engine/episode_kv_store.h),
// on the bundled engram-tiny on the CPU with real SQLite profiles in temporary folders: a chat of
// several episodes saved and restored into a fresh session continues turn for turn as the session
// that never restarted (same tokens, same routes) and builds no episode cache; saving again writes
// nothing, and a turn writes only the routed episode (the others keep their blob files); a
// truncated episode blob costs that episode alone, which is rebuilt from the text with the reason
// named; another model's fingerprint uses no episode KV at all.
#include <QTemporaryDir>
#include <QtTest>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/loaded_model.h"
#include "core/env/conversation_generator.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"

using namespace engram;
namespace fs = std::filesystem;

namespace {

const fs::path kModelDir =
    fs::path(ENGRAM_TEST_DATA) / ".." / ".." / "resources" / "models" / "engram-tiny";
constexpr int64_t kBudget = 256;
constexpr size_t kTurns = 40;  // past the budget: clustered into episodes, several routed to
constexpr size_t kMore = 6;    // turns after the restore

GenerationOptions greedy() {
  GenerationOptions o;
  o.max_new_tokens = 8;
  return o;
}

PolicyChoice epicache() {
  return {"epicache", kBudget};
}

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Episode blobs of conversation `name`: unit kind + unit id -> file name.
std::map<std::string, std::string> episode_files(storage::Database& db, const std::string& name) {
  const int64_t id = storage::ConversationRepository(db).find_by_name(name).value().id;
  std::map<std::string, std::string> out;
  for (const storage::KvBlobRecord& r : storage::KvBlobStore(db).list(id)) {
    if (r.key.unit.kind.rfind("episode_kv", 0) == 0)
      out[r.key.unit.kind + ":" + std::to_string(r.key.unit.id)] = r.file_name;
  }
  return out;
}

int32_t episode_of(const std::string& key) {  // "episode_kv:<(e << 32) | slot>" or "..._state:e"
  const int64_t id = std::stoll(key.substr(key.find(':') + 1));
  return static_cast<int32_t>(key.rfind("episode_kv_state", 0) == 0 ? id : id >> 32);
}

void copy_profile(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  fs::remove(to / "engram.lock");
}

}  // namespace

class EpisodeKvStoreTest : public QObject {
  Q_OBJECT

  std::unique_ptr<LoadedModel> model_;
  QTemporaryDir profile_;              // the conversation "c" saved after kTurns turns
  std::unique_ptr<ChatSession> live_;  // the session that never restarts
  std::vector<std::string> turns_;
  std::vector<ChatMessage> saved_history_;
  int64_t saved_episodes_ = 0;
  int64_t saved_slots_ = 0;  // every episode's working-set slots at the save
  int32_t first_route_ = -1;

  ConversationRestore restore(const fs::path& profile, ChatSession& session) {
    storage::Database db(profile);
    auto r = ConversationStore(db).restore("c", session);
    if (!r) throw std::runtime_error("no conversation c");
    return *r;
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(profile_.isValid());
    model_ = std::make_unique<LoadedModel>(
        load_model({kModelDir, "", 0}, choose_device("cpu", "f32"), {}));
    turns_ = env::user_turns(env::kHeldOutSeedBase + 700, kTurns + kMore);
    live_ = std::make_unique<ChatSession>(*model_, std::string{}, epicache());
    std::set<int32_t> routed;
    for (size_t i = 0; i < kTurns; ++i)
      routed.insert(live_->reply(turns_[i], greedy(), {}).route.episode);
    QVERIFY(live_->episodes()->clustered());
    storage::Database db(fs::path(profile_.path().toStdString()));
    ConversationStore store(db);
    const auto t0 = Clock::now();
    store.save("c", *live_);
    const double save_ms = ms_since(t0);
    const EpisodeKvSave& s = store.last_episode_save();
    saved_episodes_ = s.episodes;
    QVERIFY2(saved_episodes_ >= 2, "the chat holds fewer than two episode caches");
    // First save: every unit of every episode once. An episode is one unit after its last plan
    // plus one per write-back of the turns appended since (a turn evicts only when the working
    // set is full, GenerationOptions::evict_when_full).
    QVERIFY(s.units_written >= saved_episodes_);
    QCOMPARE(s.units_kept, int64_t{0});
    QCOMPARE(s.states_written, saved_episodes_);
    for (const EpisodeKvPlace& p : live_->episode_kv_pool()->places())
      saved_slots_ += p.tokens;
    const auto& c = model_->config;
    const int64_t per_slot = c.num_layers * 2 * c.num_kv_heads * c.head_dim * 4;
    QCOMPARE(s.kv_bytes_written, saved_slots_ * per_slot);
    saved_history_ = live_->history();
    // The store's index tells a UI what is on disk (and that there is KV to restore) without
    // reading a blob: the episode caches and their model.
    const int64_t id = storage::ConversationRepository(db).find_by_name("c").value().id;
    const std::optional<StoredSessionKv> stored = store.stored_kv(id);
    QVERIFY(stored.has_value());
    QCOMPARE(stored->episode_caches, saved_episodes_);
    QCOMPARE(stored->episode_kv_bytes, s.kv_bytes_written + s.state_bytes_written);
    QCOMPARE(stored->model_fingerprint, model_->fingerprint);
    qInfo("first save: %lld episodes, %lld slots, %lld KV bytes + %lld state bytes, %.1f ms",
          static_cast<long long>(s.episodes), static_cast<long long>(saved_slots_),
          static_cast<long long>(s.kv_bytes_written), static_cast<long long>(s.state_bytes_written),
          save_ms);
  }

  // (a) A restored session continues exactly as the live one and builds no episode cache.
  void restoredEpisodesContinueAsTheLiveSession() {
    ChatSession restored(*model_, {}, epicache());
    const auto t0 = Clock::now();
    const ConversationRestore r = restore(profile_.path().toStdString(), restored);
    const double restore_ms = ms_since(t0);
    QVERIFY2(r.kv_restored, r.rebuild_reason.c_str());
    QCOMPARE(r.rebuild_cause, KvRebuildCause::kNone);
    QVERIFY(r.episodes_restored);
    QCOMPARE(r.episode_caches_restored, saved_episodes_);
    QCOMPARE(r.episode_caches_rebuilt, int64_t{0});
    QCOMPARE(r.cached_tokens, saved_slots_);
    QVERIFY(r.episode_rebuild_reasons.empty());
    QCOMPARE(r.prefilled_tokens, int64_t{0});
    // The caches wait in the pool exactly as the live session's (checkpointed by its save).
    const EpisodeKvPool& a = *live_->episode_kv_pool();
    const EpisodeKvPool& b = *restored.episode_kv_pool();
    QCOMPARE(b.episodes(), a.episodes());
    int64_t scored = 0;
    for (int32_t e : a.episodes()) {
      const auto ua = a.episode_units(e), ub = b.episode_units(e);
      QCOMPARE(ub.size(), ua.size());
      for (size_t i = 0; i < ua.size(); ++i) {
        QVERIFY(at::equal(b.units().read(ub[i]), a.units().read(ua[i])));
        QCOMPARE(b.units().unit(ub[i]).positions, a.units().unit(ua[i]).positions);
      }
      const WorkingSetLayout &la = a.episode_layout(e), &lb = b.episode_layout(e);
      QCOMPARE(lb.tokens, la.tokens);
      QCOMPARE(lb.exact_slot, la.exact_slot);
      QCOMPARE(lb.exact_stream, la.exact_stream);
      QCOMPARE(lb.stream_end, la.stream_end);
      QCOMPARE(lb.evicted, la.evicted);
      QCOMPARE(lb.ragged, la.ragged);
      QCOMPARE(lb.compacted.defined(), la.compacted.defined());
      if (la.compacted.defined()) QVERIFY(at::equal(lb.compacted, la.compacted));
      QCOMPARE(restored.episode_ids(e), live_->episode_ids(e));
      // The policy's scores (a shrink without a fresh patch ranks by them) and the router's count
      // towards a rebuild.
      const auto &sa = live_->episode_scores(e), &sb = restored.episode_scores(e);
      QCOMPARE(sb.size(), sa.size());
      scored += sa.empty() ? 0 : 1;  // an episode never shrunk has no scores yet
      for (size_t l = 0; l < sa.size(); ++l)
        QVERIFY(at::equal(sb[l], sa[l]));
      QCOMPARE(restored.episodes()->episodes()[static_cast<size_t>(e)].fed_since_build,
               live_->episodes()->episodes()[static_cast<size_t>(e)].fed_since_build);
    }
    QVERIFY2(scored > 0, "no episode's scores went through the store");

    const int64_t live_builds = live_->episode_builds();
    std::set<int32_t> routed;
    double first_reply_ms = 0;
    for (size_t i = kTurns; i < kTurns + kMore; ++i) {
      const ChatReply x = live_->reply(turns_[i], greedy(), {});
      const auto t1 = Clock::now();
      const ChatReply y = restored.reply(turns_[i], greedy(), {});
      if (i == kTurns) {
        first_reply_ms = ms_since(t1);
        first_route_ = x.route.episode;
      }
      QCOMPARE(y.route.episode, x.route.episode);
      QCOMPARE(y.route.rebuild, x.route.rebuild);
      QCOMPARE(y.generation.tokens, x.generation.tokens);
      QCOMPARE(y.text, x.text);
      QCOMPARE(y.reused_tokens, x.reused_tokens);
      QCOMPARE(restored.cached_ids(), live_->cached_ids());
      routed.insert(y.route.episode);
    }
    // No build prefill: every episode routed to came from the store (the live session built none
    // either in these turns; a re-cluster past the rebuild limit would build in both).
    QCOMPARE(restored.episode_builds(), live_->episode_builds() - live_builds);
    QCOMPARE(restored.episode_builds(), int64_t{0});
    qInfo(
        "restore %.1f ms (rows + files %.1f ms, into the pool %.1f ms, %lld bytes read); first "
        "reply after it %.1f ms; %zu episodes routed to",
        restore_ms, r.open_ms, r.install_ms, static_cast<long long>(r.kv_bytes_read),
        first_reply_ms, routed.size());

    // Without the stored caches (as before issue 15's store: episode blobs removed) the first
    // reply builds its episode from the text.
    QTemporaryDir copy;
    copy_profile(profile_.path().toStdString(), copy.path().toStdString());
    {
      storage::Database db(fs::path(copy.path().toStdString()));
      db.exec("DELETE FROM kv_blobs WHERE unit_kind LIKE 'episode_kv%'");
    }
    ChatSession rebuilt(*model_, {}, epicache());
    const ConversationRestore rr = restore(copy.path().toStdString(), rebuilt);
    QCOMPARE(rr.rebuild_cause, KvRebuildCause::kEpisodic);
    QCOMPARE(rr.episode_caches_restored, int64_t{0});
    const auto t2 = Clock::now();
    const ChatReply z = rebuilt.reply(turns_[kTurns], greedy(), {});
    const double rebuild_ms = ms_since(t2);
    QCOMPARE(z.reused_tokens, int64_t{0});
    QCOMPARE(rebuilt.episode_builds(), int64_t{1});
    qInfo("first reply after a restore without episode caches (built from the text): %.1f ms",
          rebuild_ms);
  }

  // (b) Saving writes what the store lacks: nothing right after a save, and after one more turn
  // only the routed episode (replanned by the turn); the others keep their blob files.
  void aSaveWritesOnlyWhatChanged() {
    QTemporaryDir profile;
    const fs::path dir = profile.path().toStdString();
    copy_profile(profile_.path().toStdString(), dir);
    ChatSession session(*model_, {}, epicache());
    QVERIFY(restore(dir, session).kv_restored);
    storage::Database db(dir);
    const auto files = episode_files(db, "c");
    {
      ConversationStore store(db);
      store.save("c", session);  // restored, unchanged: nothing to write
      const EpisodeKvSave& s = store.last_episode_save();
      QCOMPARE(s.units_written, int64_t{0});
      QCOMPARE(s.states_written, int64_t{0});
      QCOMPARE(s.blobs_removed, int64_t{0});
      QCOMPARE(s.units_kept, static_cast<int64_t>(files.size()) - s.episodes);
    }
    QCOMPARE(episode_files(db, "c"), files);

    std::set<int32_t> routed;
    for (size_t i = kTurns; i < kTurns + 2; ++i) {
      const ChatReply reply = session.reply(turns_[i], greedy(), {});
      routed.insert(reply.route.episode);
      ConversationStore store(db);
      store.set_episode_rewrite_lag(0);  // write every replanned episode (the lag: below)
      const auto before = episode_files(db, "c");
      store.save("c", session);
      const EpisodeKvSave& s = store.last_episode_save();
      // The routed episode writes one unit and its state: the slots appended since its last
      // save (a turn that did not evict: GenerationOptions::evict_when_full), or its whole
      // working set when the turn's prefill replanned it.
      const auto& c = model_->config;
      const int64_t per_slot = c.num_layers * 2 * c.num_kv_heads * c.head_dim * 4;
      const int64_t slots = session.working_set().tokens();
      QCOMPARE(s.units_written, int64_t{1});
      QCOMPARE(s.states_written, int64_t{1});
      QVERIFY(s.kv_bytes_written > 0 && s.kv_bytes_written <= slots * per_slot);
      if (reply.evicted_tokens > 0) QCOMPARE(s.kv_bytes_written, slots * per_slot);
      const auto after = episode_files(db, "c");
      int64_t routed_written = 0;
      for (const auto& [key, file] : after) {
        if (episode_of(key) == reply.route.episode) {
          routed_written += !before.count(key) || before.at(key) != file ? 1 : 0;
          continue;
        }
        QCOMPARE(file, before.at(key));  // an episode not routed to writes nothing
      }
      QCOMPARE(routed_written, s.units_written + s.states_written);
      // Replaced files are gone after the commit.
      for (const auto& [key, file] : before)
        if (!after.count(key) || after.at(key) != file) QVERIFY(!fs::exists(dir / "kv" / file));
      qInfo(
          "turn %zu routed to episode %d: %lld KV bytes + %lld state bytes written, %lld units "
          "kept",
          i + 1, reply.route.episode, static_cast<long long>(s.kv_bytes_written),
          static_cast<long long>(s.state_bytes_written), static_cast<long long>(s.units_kept));
    }
  }

  // With the default lag a replanned episode keeps its stored version until it is
  // ConversationStore::kEpisodeRewriteLag tokens behind: the turns' saves write no KV; a restore
  // of that version catches the episode up (a prefill of the turns it lacks, no build) and the
  // chat goes on; a save with no lag then writes the episode. The turns ask for long replies, so
  // that each turn's prefill must make room for them and replans its episode (a turn evicts only
  // when the working set would not hold it and its reply).
  void aSaveKeepsAStoredVersionWithinTheLag() {
    QTemporaryDir profile;
    const fs::path dir = profile.path().toStdString();
    copy_profile(profile_.path().toStdString(), dir);
    ChatSession session(*model_, {}, epicache());
    QVERIFY(restore(dir, session).kv_restored);
    int64_t behind = 0;
    {
      storage::Database db(dir);
      const auto files = episode_files(db, "c");
      GenerationOptions long_reply = greedy();
      long_reply.max_new_tokens = 500;  // more than the block leaves beside the budget
      for (size_t i = kTurns; i < kTurns + 3; ++i) {
        QVERIFY(session.reply(turns_[i], long_reply, {}).evicted_tokens > 0);
        ConversationStore store(db);
        store.save("c", session);
        const EpisodeKvSave& s = store.last_episode_save();
        QCOMPARE(s.units_written, int64_t{0});
        QCOMPARE(s.kv_bytes_written, int64_t{0});
        QCOMPARE(s.states_written, int64_t{0});
        QCOMPARE(s.blobs_removed, int64_t{0});
        QVERIFY(s.episodes_deferred >= 1);
        QVERIFY(s.tokens_behind > behind);  // the routed episodes lag more with every turn
        behind = s.tokens_behind;
      }
      QVERIFY(behind < ConversationStore::kEpisodeRewriteLag);
      QCOMPARE(episode_files(db, "c"), files);  // not a file rewritten
    }

    ChatSession restored(*model_, {}, epicache());
    const ConversationRestore r = restore(dir, restored);
    QVERIFY(r.kv_restored);
    QCOMPARE(r.episode_caches_rebuilt, int64_t{0});
    QCOMPARE(restored.history().size(), session.history().size());
    const ChatReply reply = restored.reply(turns_[kTurns + 3], greedy(), {});
    QVERIFY(reply.route.episode >= 0);
    QCOMPARE(restored.episode_builds(), int64_t{0});  // caught up, not built
    QVERIFY(!reply.text.empty());

    storage::Database db(dir);
    ConversationStore store(db);
    store.set_episode_rewrite_lag(0);
    store.save("c", restored);
    QVERIFY(store.last_episode_save().units_written >= 1);
    QCOMPARE(store.last_episode_save().episodes_deferred, int64_t{0});
    qInfo("3 turns deferred: %lld tokens behind; the restore caught up and replied",
          static_cast<long long>(behind));
  }

  // (c) A truncated episode blob: that episode is rebuilt from the text, with the file named; the
  // others come back, and the text is whole.
  void aDamagedEpisodeBlobCostsThatEpisodeAlone() {
    QTemporaryDir profile;
    const fs::path dir = profile.path().toStdString();
    copy_profile(profile_.path().toStdString(), dir);
    const int32_t damaged = first_route_ >= 0 ? first_route_ : 0;
    std::string file;
    {
      storage::Database db(dir);
      for (const auto& [key, name] : episode_files(db, "c"))
        if (key.rfind("episode_kv:", 0) == 0 && episode_of(key) == damaged) file = name;
    }
    QVERIFY2(!file.empty(), "the damaged episode has no stored cache");
    fs::resize_file(dir / "kv" / file, fs::file_size(dir / "kv" / file) / 2);

    ChatSession session(*model_, {}, epicache());
    const ConversationRestore r = restore(dir, session);
    QVERIFY(!r.kv_restored);
    QCOMPARE(r.rebuild_cause, KvRebuildCause::kDamaged);
    QCOMPARE(r.episode_caches_restored, saved_episodes_ - 1);
    QCOMPARE(r.episode_caches_rebuilt, int64_t{1});
    QCOMPARE(r.episode_rebuild_reasons.size(), size_t{1});
    const std::string& why = r.episode_rebuild_reasons[0];
    QVERIFY2(why.rfind("episode " + std::to_string(damaged) + ": ", 0) == 0, why.c_str());
    QVERIFY2(why.find(file) != std::string::npos, why.c_str());
    QVERIFY2(why.find("damaged") != std::string::npos, why.c_str());
    QVERIFY2(r.rebuild_reason.find(file) != std::string::npos, r.rebuild_reason.c_str());
    QVERIFY(!session.episode_kv_pool()->has(damaged));
    QCOMPARE(static_cast<int64_t>(session.episode_kv_pool()->episodes().size()),
             saved_episodes_ - 1);
    QCOMPARE(session.history().size(), saved_history_.size());
    for (size_t i = 0; i < saved_history_.size(); ++i) {
      QCOMPARE(session.history()[i].role, saved_history_[i].role);
      QCOMPARE(session.history()[i].content, saved_history_[i].content);
    }
    // The next turn goes where the live session's went; the damaged episode is built from the
    // text when routed to, any other comes from the store.
    const ChatReply reply = session.reply(turns_[kTurns], greedy(), {});
    if (first_route_ >= 0) QCOMPARE(reply.route.episode, first_route_);
    if (reply.route.episode == damaged) {
      QCOMPARE(reply.reused_tokens, int64_t{0});
      QCOMPARE(session.episode_builds(), int64_t{1});
    } else {
      QVERIFY(reply.reused_tokens > 0);
      QCOMPARE(session.episode_builds(), int64_t{0});
    }
    // The next save drops the damaged blob (replaced when the episode was rebuilt).
    storage::Database db(dir);
    ConversationStore(db).save("c", session);
    QVERIFY(!fs::exists(dir / "kv" / file));
  }

  // (d) Another model: no episode KV is used (nor its episodes, whose vectors are that model's);
  // and episode blobs of another model beside this model's episodes are refused one by one.
  void anotherModelUsesNoEpisodeKv() {
    QTemporaryDir profile;
    const fs::path dir = profile.path().toStdString();
    copy_profile(profile_.path().toStdString(), dir);
    const std::string fingerprint = model_->fingerprint;
    model_->fingerprint = "another-model";
    ConversationRestore r;
    std::unique_ptr<ChatSession> session;
    try {
      session = std::make_unique<ChatSession>(*model_, std::string{}, epicache());
      r = restore(dir, *session);
    } catch (...) {
      model_->fingerprint = fingerprint;
      throw;
    }
    model_->fingerprint = fingerprint;
    QVERIFY(!r.kv_restored);
    QVERIFY(!r.episodes_restored);
    QCOMPARE(r.rebuild_cause, KvRebuildCause::kOtherModel);
    QVERIFY2(r.rebuild_reason.find("another model") != std::string::npos, r.rebuild_reason.c_str());
    QCOMPARE(r.episode_caches_restored, int64_t{0});
    QVERIFY(session->episode_kv_pool() == nullptr);

    // The episodes' vectors are this model's but the caches another's: each is refused.
    {
      storage::Database db(dir);
      db.exec(
          "UPDATE kv_blobs SET model_fingerprint = 'another-model' WHERE unit_kind LIKE "
          "'episode_kv%'");
    }
    ChatSession mixed(*model_, {}, epicache());
    const ConversationRestore m = restore(dir, mixed);
    QVERIFY(m.episodes_restored);
    QVERIFY(!m.kv_restored);
    QCOMPARE(m.rebuild_cause, KvRebuildCause::kOtherModel);
    QCOMPARE(m.episode_caches_restored, int64_t{0});
    QCOMPARE(static_cast<int64_t>(m.episode_rebuild_reasons.size()), saved_episodes_);
    for (const std::string& why : m.episode_rebuild_reasons)
      QVERIFY2(why.find("another-model") != std::string::npos, why.c_str());
    QVERIFY(mixed.episode_kv_pool() == nullptr || mixed.episode_kv_pool()->episodes().empty());
    const ChatReply reply = mixed.reply(turns_[kTurns], greedy(), {});
    QCOMPARE(reply.reused_tokens, int64_t{0});
    QCOMPARE(mixed.episode_builds(), int64_t{1});
  }
};

QTEST_GUILESS_MAIN(EpisodeKvStoreTest)
#include "test_episode_kv_store.moc"
