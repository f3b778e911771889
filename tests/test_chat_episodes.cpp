// EpiCache in a chat (issue 15): the episode router on hand-made embeddings (clustering when the
// conversation outgrows the budget, routing to the nearest centroid, a new episode below τ, a
// re-cluster + rebuild when an episode was fed past its limit, a reset on an edited history),
// then ChatSession with the bundled engram-tiny on the CPU: under the budget `epicache` answers
// exactly as `full`; over it every turn is routed to an episode whose stream is a prefix of the
// conversation, an episode routed to again resumes its own cache (write-back), and the episodes
// and their caches survive the store and answer the next turn as before.
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/engine/assistant.h"
#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/loaded_model.h"
#include "core/engine/turn_progress.h"
#include "core/env/conversation_generator.h"
#include "core/policies/epicache_policy.h"
#include "core/policies/episode_router.h"
#include "core/policies/episode_trace.h"
#include "core/policies/layer_budget.h"
#include "core/policies/lexical_embedding.h"
#include "core/policies/policy_registry.h"
#include "storage/conversation_export.h"
#include "storage/database.h"

using namespace engram;
namespace fs = std::filesystem;

namespace {

const fs::path kModelDir =
    fs::path(ENGRAM_TEST_DATA) / ".." / ".." / "resources" / "models" / "engram-tiny";

// Topic words -> axes: a text's embedding counts them (plus a small constant so that no vector
// is zero). Counts how many texts were embedded.
struct TopicEmbedder {
  int calls = 0;
  Embedding operator()(const std::string& text) {
    ++calls;
    static const std::vector<std::string> topics = {"cat", "rain", "guitar", "chess"};
    Embedding v(topics.size() + 1, 0.0f);
    for (size_t t = 0; t < topics.size(); ++t)
      for (size_t at = text.find(topics[t]); at != std::string::npos;
           at = text.find(topics[t], at + 1))
        v[t] += 1.0f;
    v.back() = 0.05f;
    return v;
  }
};

std::vector<std::string> topic_lines(const std::vector<std::string>& words) {
  std::vector<std::string> lines;
  for (const std::string& w : words) {
    lines.push_back(EpisodeRouter::utterance_line("user", "my " + w + " today"));
    lines.push_back(EpisodeRouter::utterance_line("assistant", "nice " + w));
  }
  return lines;
}

EpisodeRouterOptions router_options() {
  EpisodeRouterOptions o;
  o.episodes = 3;
  o.w_embed = 4;
  o.centre = false;  // the hand-made axes need no centring
  return o;
}

GenerationOptions greedy(int64_t tokens = 16) {
  GenerationOptions o;
  o.max_new_tokens = tokens;
  return o;
}

std::vector<std::string> user_turns(size_t n) {
  return env::user_turns(env::kHeldOutSeedBase + 700, n);
}

// The last turn's prompt: the conversation before the reply, with the generation prompt.
std::vector<int64_t> last_prompt(const LoadedModel& model, const ChatSession& session) {
  std::vector<ChatMessage> before = session.history();
  before.pop_back();
  const std::vector<int32_t> ids = model.chat_template->encode(*model.tokenizer, before, true);
  return {ids.begin(), ids.end()};
}

// ~3,000 tokens of chat with engram-tiny's template: several blocks under any budget.
std::vector<ChatMessage> long_history() {
  std::vector<ChatMessage> history;
  const std::vector<std::string> texts = user_turns(120);
  for (size_t i = 0; i + 1 < texts.size(); i += 2) {
    history.push_back({"user", texts[i]});
    history.push_back({"assistant", texts[i + 1]});
  }
  return history;
}

bool is_prefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

class ChatEpisodesTest : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void routerWaitsForTheBudgetThenClustersAndRoutes() {
    EpisodeRouter router(router_options());
    TopicEmbedder embed;
    const auto e = [&](const std::string& t) { return embed(t); };
    const std::vector<std::string> lines =
        topic_lines({"cat", "cat", "rain", "rain", "guitar", "guitar"});
    const std::string query = EpisodeRouter::utterance_line("user", "what about the rain?");
    EpisodeRoute r = router.route(lines, query, /*over_budget=*/false, e);
    QCOMPARE(r.episode, -1);
    QVERIFY(!router.clustered());
    QCOMPARE(router.window_texts().size(), size_t{3});  // windows are embedded as they come

    r = router.route(lines, query, /*over_budget=*/true, e);
    QVERIFY(r.clustered);
    QCOMPARE(router.episodes().size(), size_t{3});
    // Each episode holds one topic's window; the rain query goes to the rain episode.
    const ChatEpisode& routed = router.episodes()[static_cast<size_t>(r.episode)];
    QCOMPARE(routed.windows.size(), size_t{1});
    QVERIFY(router.window_texts()[routed.windows[0]].find("rain") != std::string::npos);
    QVERIFY(routed.patch_source.find("rain") != std::string::npos);
    QCOMPARE(r.cosines.size(), size_t{3});

    // The same history again: no window is embedded twice (only the query).
    const int before = embed.calls;
    (void)router.route(lines, query, true, e);
    QCOMPARE(embed.calls, before + 1);
  }

  // Between turns a long history is embedded a bounded piece at a time and clustered ahead of
  // its first question: the same episodes as that question's route would have made, and the
  // route then only embeds and matches the query.
  void aHistoryIndexedAheadClustersAsItsFirstRouteWould() {
    TopicEmbedder embed;
    const TextsEmbedder texts = [&](const std::vector<std::string>& ts) {
      std::vector<Embedding> out;
      for (const std::string& t : ts)
        out.push_back(embed(t));
      return out;
    };
    const std::vector<std::string> lines =
        topic_lines({"cat", "cat", "rain", "rain", "guitar", "guitar", "cat", "rain"});
    const std::string query = EpisodeRouter::utterance_line("user", "what about the rain?");
    EpisodeRouter ahead(router_options());
    QVERIFY(!ahead.cluster_now().clustered);  // nothing embedded yet
    std::vector<size_t> done;
    for (int step = 0; step < 10; ++step) {
      const EpisodeRouter::Indexed i = ahead.index(lines, texts, /*max_chars=*/1);
      QCOMPARE(i.total, size_t{4});
      done.push_back(i.done);
      if (i.done == i.total) break;
    }
    QCOMPARE(done, (std::vector<size_t>{1, 2, 3, 4}));       // one window a step at least, in order
    QCOMPARE(ahead.index(lines, texts, 1).done, size_t{4});  // nothing left: nothing embedded
    QCOMPARE(embed.calls, 4);
    QVERIFY(!ahead.clustered());
    QVERIFY(ahead.cluster_now().clustered);
    QVERIFY(!ahead.cluster_now().clustered);  // once

    EpisodeRouter turn(router_options());
    const EpisodeRoute first = turn.route(lines, query, /*over_budget=*/true, texts);
    QVERIFY(first.clustered);
    QCOMPARE(ahead.assignment(), turn.assignment());
    QCOMPARE(ahead.episodes().size(), turn.episodes().size());
    for (size_t e = 0; e < turn.episodes().size(); ++e)
      QCOMPARE(ahead.episodes()[e].patch_source, turn.episodes()[e].patch_source);
    const int calls = embed.calls;
    const EpisodeRoute later = ahead.route(lines, query, /*over_budget=*/true, texts);
    QVERIFY(!later.clustered);
    QCOMPARE(later.episode, first.episode);
    QCOMPARE(embed.calls, calls + 1);  // the query alone
    // A larger piece a step takes several windows at once.
    EpisodeRouter wide(router_options());
    QCOMPARE(wide.index(lines, texts, lines[0].size() * 5).done, size_t{2});
  }

  void aQueryBelowTauCreatesAnEpisodeUpToTheCap() {
    EpisodeRouterOptions o = router_options();
    o.tau = 0.5;
    o.max_episodes = 4;
    EpisodeRouter router(o);
    TopicEmbedder embed;
    const auto e = [&](const std::string& t) { return embed(t); };
    const std::vector<std::string> lines =
        topic_lines({"cat", "cat", "rain", "rain", "guitar", "guitar"});
    const std::string chess = EpisodeRouter::utterance_line("user", "shall we play chess?");
    EpisodeRoute r = router.route(lines, chess, true, e);
    QVERIFY(r.created);
    QCOMPARE(r.episode, 3);
    QVERIFY(router.episodes()[3].created);
    QCOMPARE(router.episodes()[3].patch_source, chess);
    QCOMPARE(router.episodes()[3].medoid, kNoMedoid);
    // A second chess turn routes to the new episode (cosine 1), no creation.
    r = router.route(lines, chess, true, e);
    QVERIFY(!r.created);
    QCOMPARE(r.episode, 3);
    // At the cap, an unseen topic goes to the nearest episode instead.
    EpisodeRouterOptions capped = o;
    capped.max_episodes = 3;
    EpisodeRouter full(capped);
    r = full.route(lines, chess, true, e);
    QVERIFY(!r.created);
    QCOMPARE(full.episodes().size(), size_t{3});
  }

  void anEpisodeFedPastItsLimitIsReclusteredAndRebuilt() {
    EpisodeRouterOptions o = router_options();
    o.rebuild_tokens = 100;
    EpisodeRouter router(o);
    TopicEmbedder embed;
    const auto e = [&](const std::string& t) { return embed(t); };
    std::vector<std::string> lines =
        topic_lines({"cat", "cat", "rain", "rain", "guitar", "guitar"});
    const std::string cat = EpisodeRouter::utterance_line("user", "my cat again");
    EpisodeRoute r = router.route(lines, cat, true, e);
    const int32_t episode = r.episode;
    router.fed(episode, 60);
    r = router.route(lines, cat, true, e);
    QVERIFY(!r.rebuild);
    router.fed(episode, 60);  // 120 > 100
    // Two more cat windows arrive: the re-cluster puts them with the cat episode.
    for (const std::string& l : topic_lines({"cat", "cat"}))
      lines.push_back(l);
    r = router.route(lines, cat, true, e);
    QVERIFY(r.rebuild);
    QVERIFY(r.reclustered);
    QCOMPARE(r.episode, episode);
    QCOMPARE(router.episodes()[static_cast<size_t>(episode)].windows.size(), size_t{2});
    router.built(episode);
    QCOMPARE(router.episodes()[static_cast<size_t>(episode)].fed_since_build, int64_t{0});
  }

  void anEditedHistoryStartsTheEpisodesAgain() {
    EpisodeRouter router(router_options());
    TopicEmbedder embed;
    const auto e = [&](const std::string& t) { return embed(t); };
    const std::string q = EpisodeRouter::utterance_line("user", "rain?");
    (void)router.route(topic_lines({"cat", "cat", "rain", "rain", "guitar", "guitar"}), q, true, e);
    QVERIFY(router.clustered());
    // The first window's text changes: what was clustered no longer describes the chat.
    const EpisodeRoute r = router.route(
        topic_lines({"chess", "cat", "rain", "rain", "guitar", "guitar"}), q, false, e);
    QCOMPARE(r.episode, -1);
    QVERIFY(!router.clustered());
  }

  void initTestCase() {
    model_ = std::make_unique<LoadedModel>(
        load_model({kModelDir, "", 0}, choose_device("cpu", "f32"), {}));
    QVERIFY(model_->tokenizer && model_->chat_template);
  }

  void underTheBudgetItAnswersAsFull() {
    ChatSession full(*model_, {}, {"full", 0});
    ChatSession epi(*model_, {}, {"epicache", 2048});
    QVERIFY(epi.episodes() != nullptr);
    for (const std::string& turn : user_turns(6)) {
      const ChatReply a = full.reply(turn, greedy(), {});
      const ChatReply b = epi.reply(turn, greedy(), {});
      QCOMPARE(b.generation.tokens, a.generation.tokens);
      QCOMPARE(b.route.episode, -1);
    }
    QVERIFY(!epi.episodes()->clustered());
  }

  void overTheBudgetEveryTurnGoesToAnEpisodeAndResumesItsCache() {
    ChatSession session(*model_, {}, {"epicache", 256});
    std::map<int32_t, int64_t> stream_after;  // episode -> its stream length after its last turn
    std::set<int32_t> routed;
    int resumed = 0, appended = 0;
    for (const std::string& turn : user_turns(30)) {
      const ChatReply r = session.reply(turn, greedy(), {});
      if (r.route.episode < 0) {
        QVERIFY(stream_after.empty());  // once clustered, every turn is routed
        QVERIFY(!session.episode_trace_step(r).has_value());
        continue;
      }
      QVERIFY(r.route.episode < r.episodes);
      routed.insert(r.route.episode);
      QVERIFY(!r.memory_note.empty());
      // Back to an episode: its own stream comes back whole (written back, not recomputed).
      if (const auto it = stream_after.find(r.route.episode);
          it != stream_after.end() && !r.route.rebuild && !r.rebuilt) {
        QCOMPARE(r.reused_tokens, it->second);
        ++resumed;
      }
      // The routed episode's stream is the conversation (its prompt, then the reply's tokens);
      // attention stays bounded.
      QVERIFY(is_prefix(last_prompt(*model_, session), session.cached_ids()));
      QVERIFY(session.working_set().tokens() <= 256 + 512);
      // A turn evicts only when its episode's working set would not hold it and its reply
      // (GenerationOptions::evict_when_full): most turns append without re-planning.
      if (r.evicted_tokens == 0 && !r.route.rebuild && !r.rebuilt) ++appended;
      stream_after[r.route.episode] = session.cached_tokens();
      // The episodes panel's live step: consistent, routed where the turn went, the routed
      // episode's cache as large as the working set.
      const auto step = session.episode_trace_step(r);
      QVERIFY(step.has_value());
      validate_episode_trace_step(*step);
      QCOMPARE(step->query.episode, int64_t{r.route.episode});
      QCOMPARE(step->episodes[static_cast<size_t>(r.route.episode)].cache_tokens,
               session.working_set().tokens());
      QCOMPARE(step->windows.size(), session.episodes()->window_texts().size());
    }
    QVERIFY(session.episodes()->clustered());
    QVERIFY2(routed.size() >= 2, "the turns all went to one episode");
    QVERIFY(resumed > 0);
    QVERIFY2(appended > 0, "every turn re-planned its episode");
    // The waiting episodes are units of the paged pool, in the pinned tier (room for E).
    QVERIFY(session.episode_kv_pool() != nullptr);
    QVERIFY(!session.episode_kv_pool()->places().empty());
    for (const EpisodeKvPlace& p : session.episode_kv_pool()->places())
      QCOMPARE(p.tier, PageTier::kPinned);
    last_episodes_ = static_cast<int64_t>(session.episodes()->episodes().size());
  }

  // With room for one working set in the pinned tier the other episodes wait on disk, and the chat
  // answers exactly as with every episode pinned.
  void spilledEpisodesAnswerAsPinnedOnes() {
    ChatSession pinned(*model_, {}, {"epicache", 256});
    ChatSession spilled(*model_, {}, {"epicache", 256});
    EpisodeKvPoolOptions one;  // 13 pages of 64 tokens: two ~270-token episodes
    one.pinned_episodes = 1;
    one.max_units_per_episode = 1;
    one.spill_dir = spill_.path().toStdString();
    spilled.set_episode_kv_options(one);
    int64_t switches = 0;
    int32_t last = -1;
    for (const std::string& turn : user_turns(24)) {
      const ChatReply a = pinned.reply(turn, greedy(), {});
      const ChatReply b = spilled.reply(turn, greedy(), {});
      QCOMPARE(b.generation.tokens, a.generation.tokens);
      QCOMPARE(b.route.episode, a.route.episode);
      if (a.route.episode >= 0 && last >= 0 && a.route.episode != last) {
        ++switches;
      }
      last = a.route.episode;
    }
    QVERIFY(switches >= 2);
    QVERIFY(spilled.episode_kv_pool()->spilled_tokens() > 0);
    // The memory inspector's rows: every waiting episode, where its KV is.
    MemorySnapshot snap;
    add_waiting_episodes(snap, spilled, 1000);
    int64_t waiting = 0, on_disk = 0;
    for (const EpisodeKvPlace& p : spilled.episode_kv_pool()->places()) {
      if (p.episode == spilled.active_episode()) continue;
      ++waiting;
      on_disk += p.tier == PageTier::kDisk ? p.tokens : 0;
    }
    QCOMPARE(static_cast<int64_t>(snap.units.size()), waiting);
    QVERIFY(waiting >= 1);
    for (const MemoryUnit& u : snap.units) {
      QCOMPARE(u.kind, std::string("episode"));
      QVERIFY(u.location == MemoryLocation::kDisk || u.location == MemoryLocation::kPinnedCpu);
      QCOMPARE(u.bytes, u.tokens * 1000);
    }
    QCOMPARE(snap.tokens_by_location[static_cast<int>(MemoryLocation::kDisk)], on_disk);
    QCOMPARE(pinned.episode_kv_pool()->spilled_tokens(), int64_t{0});
  }

  void calibratedLayerBudgetsComeFromTheModelsCalibration() {
    // Not calibrated: uniform budgets, and the session says how to calibrate.
    ChatSession plain(*model_, {}, {"epicache:calibrated=1", 512});
    QCOMPARE(plain.policy().budget(), int64_t{512});
    QVERIFY(plain.policy_note().find("engram-cli calibrate") != std::string::npos);
    // Calibrated: M_l from the measured cosines, L x 512 tokens in all; the working set holds
    // the largest layer.
    LayerCalibration c;
    c.model_fingerprint = model_->fingerprint;
    c.key_cosine.assign(static_cast<size_t>(model_->config.num_layers), 0.995);
    c.key_cosine[2] = 0.98;
    c.alpha = 1.0;
    model_->layer_calibration = c;
    ChatSession calibrated(*model_, {}, {"epicache:calibrated=1", 512});
    model_->layer_calibration.reset();
    const auto& epi = static_cast<const EpiCachePolicy&>(calibrated.policy());
    const std::vector<int64_t> expected = allocate_layer_budgets(
        c.key_cosine, 512, 1.0,
        model_->config.max_positions - session_prefill_block(model_->config.max_positions));
    QCOMPARE(epi.layer_budgets(), expected);
    QCOMPARE(calibrated.policy().budget(), *std::max_element(expected.begin(), expected.end()));
    QVERIFY(expected[2] > 512);
    QVERIFY(calibrated.policy_note().find("calibrated layer budgets") != std::string::npos);
    QVERIFY(calibrated.working_set().cache().capacity() >= expected[2]);
    // It answers a turn past the budget (the layer budgets shape its plans).
    for (const std::string& turn : user_turns(12))
      (void)calibrated.reply(turn, greedy(8), {});
    QVERIFY(calibrated.working_set().tokens() <= calibrated.policy().budget() + 512);
  }

  // A long history's first routed turn indexes the windows, then builds its episode in blocks, and
  // says so as it goes; stopped in the build it keeps the blocks it did, and tried again it goes
  // on from them and answers exactly as the turn that was never stopped.
  void aStoppedBuildKeepsItsBlocksAndGoesOnFromThem() {
    const std::vector<ChatMessage> history = long_history();
    const std::string turn = user_turns(121).back();
    ChatSession whole(*model_, {}, {"epicache", 256});
    whole.set_history(history);
    std::vector<TurnProgress> seen;
    const ChatReply a =
        whole.reply(turn, greedy(8), {}, [&](const TurnProgress& p) { seen.push_back(p); });
    QVERIFY(a.route.clustered);
    std::vector<TurnProgress> indexing, building;
    for (const TurnProgress& p : seen)
      (p.stage == TurnProgress::Stage::kIndexing ? indexing : building).push_back(p);
    QVERIFY(!indexing.empty());
    QVERIFY2(building.size() >= 3, "the build took fewer than three blocks");
    QCOMPARE(indexing.back().done, indexing.back().total);
    for (size_t i = 1; i < indexing.size(); ++i)
      QVERIFY(indexing[i].done > indexing[i - 1].done);
    for (size_t i = 0; i < building.size(); ++i) {
      QCOMPARE(building[i].stage, TurnProgress::Stage::kBuilding);
      QCOMPARE(building[i].episode, a.route.episode);
      QCOMPARE(int64_t{building[i].episodes}, a.episodes);
      QCOMPARE(building[i].total, a.generation.prompt_tokens);
      if (i > 0) QVERIFY(building[i].done > building[i - 1].done);
    }
    QCOMPARE(building.back().done, building.back().total);
    QVERIFY(describe_turn_progress(building.front())
                .starts_with("Building episode " + std::to_string(a.route.episode + 1) + " of " +
                             std::to_string(a.episodes) + " from the history: "));
    QCOMPARE(describe_turn_progress({TurnProgress::Stage::kBuilding, 1, 4, 12288, 20017}),
             std::string("Building episode 2 of 4 from the history: 12,288 of 20,017 tokens"));
    QCOMPARE(describe_turn_progress({TurnProgress::Stage::kIndexing, -1, 0, 48, 1216}),
             std::string("Indexing the conversation: 48 of 1,216 windows"));
    QCOMPARE(describe_turn_progress({TurnProgress::Stage::kReading, -1, 0, 512, 3000}),
             std::string("Reading the conversation: 512 of 3,000 tokens"));

    // The same turn, stopped after its build's second block.
    ChatSession stopped(*model_, {}, {"epicache", 256});
    stopped.set_history(history);
    std::atomic<bool> cancel{false};
    GenerationOptions options = greedy(8);
    options.cancel = &cancel;
    int blocks = 0;
    int64_t done_at_stop = 0;
    const ChatReply b = stopped.reply(turn, options, {}, [&](const TurnProgress& p) {
      if (p.stage == TurnProgress::Stage::kBuilding && ++blocks == 2) {
        cancel = true;
        done_at_stop = p.done;
      }
    });
    QVERIFY(b.prefill_cancelled);
    QCOMPARE(b.generation.stop_reason, std::string("cancelled"));
    QVERIFY(b.generation.tokens.empty());
    QVERIFY(b.text.empty());
    QCOMPARE(b.route.episode, a.route.episode);
    QCOMPARE(blocks, 2);
    QCOMPARE(stopped.cached_tokens(), done_at_stop);
    QVERIFY(is_prefix(stopped.cached_ids(), last_prompt(*model_, stopped)));
    QCOMPARE(stopped.history().back().role, std::string("assistant"));

    // Tried again: the build goes on from the blocks done.
    cancel = false;
    const ChatReply c = stopped.regenerate(options, {});
    QVERIFY(!c.prefill_cancelled);
    QCOMPARE(c.route.episode, a.route.episode);
    QCOMPARE(c.reused_tokens, done_at_stop);
    QCOMPARE(c.generation.tokens, a.generation.tokens);
    QCOMPARE(stopped.cached_ids(), whole.cached_ids());
    // The build's second part is the build, not new text towards a rebuild.
    const auto e = static_cast<size_t>(a.route.episode);
    QCOMPARE(stopped.episodes()->episodes()[e].fed_since_build,
             whole.episodes()->episodes()[e].fed_since_build);
  }

  // Between turns the app brings the waiting episodes up to the conversation a block at a time
  // (the ones not built first): afterwards no episode is a block behind the conversation, and
  // the next turn, wherever it goes, builds nothing.
  void waitingEpisodesArePreparedBetweenTurns() {
    ChatSession session(*model_, {}, {"epicache", 256});
    session.set_history(long_history());
    const std::vector<std::string> turns = user_turns(3);
    const ChatReply first = session.reply(turns[0], greedy(8), {});
    QVERIFY(first.route.clustered);
    const int64_t builds = session.episode_builds();
    const int64_t episodes = first.episodes;
    QVERIFY(episodes >= 2);
    const std::vector<int32_t> rendered =
        model_->chat_template->encode(*model_->tokenizer, session.history(), false);
    std::set<int32_t> prepared;
    int steps = 0;
    while (const auto step = session.prepare_waiting_episode()) {
      QCOMPARE(step->stage, TurnProgress::Stage::kPreparing);
      QCOMPARE(int64_t{step->episodes}, episodes);
      QCOMPARE(step->total, static_cast<int64_t>(rendered.size()));
      QVERIFY(step->done <= step->total);
      QCOMPARE(session.active_episode(), step->episode);
      QVERIFY(is_prefix(session.cached_ids(), {rendered.begin(), rendered.end()}));
      prepared.insert(step->episode);
      QVERIFY2(++steps < 200, "the preparation does not end");
    }
    QVERIFY(!prepared.contains(first.route.episode));  // the routed one is current
    // The episodes the first turn did not build, each built once, now whole.
    QCOMPARE(static_cast<int64_t>(prepared.size()), episodes - 1);
    QCOMPARE(session.episode_builds(), builds + episodes - 1);
    // Each one less than a block behind the conversation (a block is 512 on the CPU).
    for (int32_t e : prepared) {
      const std::vector<int64_t>& ids = session.episode_ids(e);
      QVERIFY(is_prefix(ids, {rendered.begin(), rendered.end()}));
      QVERIFY(rendered.size() - ids.size() < 512);
      // Built in many steps, still a build: nothing counts towards a rebuild.
      QCOMPARE(session.episodes()->episodes()[static_cast<size_t>(e)].fed_since_build, int64_t{0});
    }
    // The episode left active was written to the pool after its build's plans moved its slots,
    // so leaving it writes nothing while the next turn waits.
    const int32_t active = session.active_episode();
    QVERIFY(active >= 0);
    const int64_t unwritten = session.episode_kv_pool()->unwritten(active, session.working_set());
    QVERIFY(unwritten <= 512);
    const int64_t written = session.episode_kv_pool()->written_tokens();
    // A new turn, wherever it goes, builds nothing and reuses all but that last block at most.
    const ChatReply next = session.reply(turns[1], greedy(8), {});
    if (next.route.episode != active)
      QCOMPARE(session.episode_kv_pool()->written_tokens() - written, unwritten);
    QVERIFY(next.route.episode >= 0);
    QVERIFY(!next.route.rebuild);
    QCOMPARE(session.episode_builds(), builds + episodes - 1);
    QVERIFY2(next.reused_tokens > static_cast<int64_t>(rendered.size()) - 512,
             qPrintable(QString("%1 of %2").arg(next.reused_tokens).arg(rendered.size())));
    // Nothing left to prepare that is a block behind: at most the routed episode's stream brought
    // to the reply as the conversation renders it, and its shrink or write-back.
    int settling = 0;
    while (const auto step = session.prepare_waiting_episode()) {
      QCOMPARE(step->episode, next.route.episode);
      QVERIFY2(++settling <= 2, "more than settling the active episode");
    }
    QCOMPARE(session.cached_ids().size(),
             model_->chat_template->encode(*model_->tokenizer, session.history(), false).size());
  }

  // After a turn that leaves the active episode past its budget by half a block, the work
  // between turns shrinks it to the budget (scored with its patch) and writes it to the pool, so
  // its next turn appends and the switch away from it writes nothing while a turn waits.
  void theActiveEpisodeMakesRoomBetweenTurns() {
    ChatSession session(*model_, {}, {"epicache", 256});
    session.set_history(long_history());
    for (int steps = 0; session.prepare_waiting_episode(); ++steps)
      QVERIFY2(steps < 300, "the preparation does not end");
    int shrunk = 0;
    for (const std::string& turn : user_turns(12)) {
      // Never a rebuild from the text: the shrink comes after the stream was brought to the
      // conversation as the next turn renders it, so that turn cuts nothing compacted.
      const ChatReply r = session.reply(turn + " " + turn + " " + turn, greedy(64), {});
      QVERIFY(!r.rebuilt);
      QVERIFY(!r.route.rebuild);
      // The reply as the history keeps it need not be the ids fed (a re-tokenization, a stop
      // string cut): a reply text that renders otherwise from its start (past the 32 tokens
      // every plan keeps as they are) stands for that here.
      std::vector<ChatMessage> history = session.history();
      history.back().content = "Well, " + history.back().content;
      session.set_history(history);
      const int32_t active = session.active_episode();
      const int64_t after_turn = session.working_set().tokens();
      const int64_t written = session.episode_kv_pool()->written_tokens();
      for (int steps = 0; session.prepare_waiting_episode(); ++steps)
        QVERIFY2(steps < 300, "the preparation does not end");
      if (session.active_episode() != active) continue;  // a rebuild or catch-up moved on
      // Its stream is the conversation as the next turn renders it (the reply fed again).
      const std::vector<int32_t> rendered =
          model_->chat_template->encode(*model_->tokenizer, session.history(), false);
      QVERIFY(session.cached_ids() == std::vector<int64_t>(rendered.begin(), rendered.end()));
      if (after_turn > 256 + 256) {
        QCOMPARE(session.working_set().tokens(), int64_t{256});
        QVERIFY(session.episode_kv_pool()->written_tokens() > written);
        ++shrunk;
      }
      QVERIFY(session.working_set().tokens() <= 256 + 256);
      QVERIFY(session.episode_kv_pool()->unwritten(active, session.working_set()) <= 512);
    }
    QVERIFY2(shrunk > 0, "no turn left its episode half a block past the budget");
  }

  // An episode whose own turns passed its limit is re-clustered and rebuilt between turns, as a
  // turn routed there would have done: with the work between turns no turn rebuilds or builds.
  // Only an episode's own turns count towards its limit: the routed episode's count grows by
  // exactly the turn (its user message and reply), not by the others' turns it caught up on,
  // and catching up between turns counts for nothing.
  void episodesPastTheirLimitAreRebuiltBetweenTurns() {
    ChatSession session(*model_, {}, {"epicache:rebuild=200", 256});
    session.set_history(long_history());
    const int64_t limit = session.episodes()->options().rebuild_tokens;
    QCOMPARE(limit, int64_t{200});
    const auto fed = [&] {
      std::vector<int64_t> out;
      for (const ChatEpisode& e : session.episodes()->episodes())
        out.push_back(e.fed_since_build);
      return out;
    };
    const auto prepare_all = [&] {
      const std::vector<int64_t> before = fed();
      int steps = 0;
      while (session.prepare_waiting_episode())
        QVERIFY2(++steps < 500, "the preparation does not end");
      const std::vector<int64_t> after = fed();
      for (size_t e = 0; e < before.size(); ++e)
        QVERIFY2(after[e] == before[e] || after[e] == 0, "a catch-up counted towards a rebuild");
    };
    const std::vector<std::string> turns = user_turns(40);
    prepare_all();  // indexed, clustered and built before the first question
    int64_t rebuilt_between = 0, counted = 0;
    for (size_t i = 0; i < turns.size(); ++i) {
      const std::vector<int64_t> before = fed();
      const ChatReply r = session.reply(turns[i], greedy(8), {});
      QVERIFY2(!r.route.rebuild, "a turn rebuilt an episode");
      QVERIFY2(r.reused_tokens > 0, "a turn built an episode");
      const std::vector<int64_t> after = fed();
      std::vector<ChatMessage> earlier = session.history();
      earlier.resize(earlier.size() - 2);  // without this turn's message and reply
      const auto own =
          static_cast<int64_t>(session.cached_ids().size()) -
          static_cast<int64_t>(
              model_->chat_template->encode(*model_->tokenizer, earlier, false).size());
      for (size_t e = 0; e < after.size(); ++e) {
        if (static_cast<int32_t>(e) != r.route.episode) {
          QCOMPARE(after[e], before[e]);
        } else if (after[e] - before[e] == own) {
          ++counted;
        } else {
          // The first turn after a build left less than a block behind finishes that build, and
          // what a build takes in is the build.
          QCOMPARE(after[e], int64_t{0});
        }
      }
      const int64_t builds = session.episode_builds();
      prepare_all();
      rebuilt_between += session.episode_builds() - builds;
      for (const ChatEpisode& e : session.episodes()->episodes())
        QVERIFY(e.fed_since_build <= limit);
    }
    qInfo("%lld episodes rebuilt between turns, %lld turns counted whole",
          static_cast<long long>(rebuilt_between), static_cast<long long>(counted));
    QVERIFY(counted > static_cast<int64_t>(turns.size()) / 2);
    QVERIFY2(rebuilt_between > 0, "no episode outgrew its limit in these turns");
  }

  // A long history opened without a question (an import): the work between turns indexes its
  // windows a block's worth of text a step, clusters them as the first question's route would,
  // and builds every episode, so that question only routes: no clustering, no build.
  void aLongHistoryIsPreparedBeforeItsFirstQuestion() {
    ChatSession session(*model_, {}, {"epicache", 256});
    session.set_history(long_history());
    const std::vector<int32_t> rendered =
        model_->chat_template->encode(*model_->tokenizer, session.history(), false);
    int64_t indexing = 0, last_done = 0;
    std::set<int32_t> built;
    std::map<int32_t, int64_t> built_done;
    int steps = 0;
    while (const auto step = session.prepare_waiting_episode()) {
      if (step->stage == TurnProgress::Stage::kIndexing) {
        QVERIFY(built.empty());  // indexing and clustering come first
        QVERIFY(step->done > last_done);
        last_done = step->done;
        ++indexing;
      } else {
        QCOMPARE(step->stage, TurnProgress::Stage::kPreparing);
        QVERIFY(session.episodes()->clustered());
        // A step is one forward: the block less the episode's patch (a whole block was cut in
        // two inside the prefill, a forward and an eviction each); the last may only write the
        // active episode to the pool.
        if (built.contains(step->episode) && step->done < step->total) {
          QVERIFY(step->done >= built_done[step->episode]);
          QVERIFY2(step->done - built_done[step->episode] < 512,
                   qPrintable(QString::number(step->done - built_done[step->episode])));
        }
        built.insert(step->episode);
        built_done[step->episode] = step->done;
      }
      QVERIFY2(++steps < 300, "the preparation does not end");
    }
    QVERIFY2(indexing > 1, "the whole history was indexed in one step");
    QCOMPARE(static_cast<size_t>(last_done), session.episodes()->window_texts().size());
    const auto episodes = static_cast<int32_t>(session.episodes()->episodes().size());
    QVERIFY(episodes >= 2);
    QCOMPARE(static_cast<int32_t>(built.size()), episodes);
    QCOMPARE(session.episode_builds(), int64_t{episodes});
    for (int32_t e = 0; e < episodes; ++e) {
      QVERIFY(is_prefix(session.episode_ids(e), {rendered.begin(), rendered.end()}));
      QVERIFY(rendered.size() - session.episode_ids(e).size() < 512);  // a block on the CPU
    }
    const ChatReply first = session.reply(user_turns(1)[0], greedy(8), {});
    QVERIFY(!first.route.clustered);
    QVERIFY(first.route.episode >= 0);
    QVERIFY(!first.route.rebuild);
    QCOMPARE(session.episode_builds(), int64_t{episodes});
    QVERIFY2(first.reused_tokens > static_cast<int64_t>(rendered.size()) - 512,
             qPrintable(QString("%1 of %2").arg(first.reused_tokens).arg(rendered.size())));
    // The clustering is the one the question would have made itself.
    ChatSession direct(*model_, {}, {"epicache", 256});
    direct.set_history(long_history());
    const ChatReply unprepared = direct.reply(user_turns(1)[0], greedy(8), {});
    QVERIFY(unprepared.route.clustered);
    QCOMPARE(first.route.episode, unprepared.route.episode);
    QCOMPARE(session.episodes()->assignment(), direct.episodes()->assignment());
  }

  // The app's side: a long conversation imported (no KV) and opened under epicache is prepared
  // before any question (Assistant::prepare_memory_step); the app closes after the first episode
  // and a block of the second, and saves. Reopened, the store has those two caches and the
  // episodes, and the preparation goes on from them: the second caught up, the others built,
  // all stored, and the first question builds nothing.
  void theAssistantPreparesAndStoresEveryEpisode() {
    QTemporaryDir profile;
    const fs::path file = fs::path(profile.path().toStdString()) / "long.json";
    {
      storage::ConversationTranscript t;
      t.conversation.name = "long";
      t.conversation.memory_policy = "epicache";
      t.conversation.kv_budget = 256;
      int64_t i = 0;
      for (const ChatMessage& m : long_history())
        t.utterances.push_back({0, i++, m.role, m.content, 0, 0, 0});
      std::ofstream(file) << storage::conversations_to_json({t});
    }
    const fs::path dir = fs::path(profile.path().toStdString()) / "profile";
    int64_t id = 0;
    {
      Assistant assistant(dir);
      (void)assistant.load({kModelDir, "cpu", "f32"});
      const std::vector<ConversationInfo> imported = assistant.import_conversations(file);
      QCOMPARE(imported.size(), size_t{1});
      id = imported[0].id;
      (void)assistant.open_conversation(id);
      QCOMPARE(assistant.memory_policy().spec, std::string("epicache"));
      bool indexed = false;
      int steps = 0;
      while (const auto step = assistant.prepare_memory_step()) {
        indexed = indexed || step->stage == TurnProgress::Stage::kIndexing;
        if (step->stage == TurnProgress::Stage::kPreparing && step->episode == 1) break;
        QVERIFY2(++steps < 300, "the preparation does not end");
      }
      QVERIFY(indexed);
      (void)assistant.save_memory();
      QCOMPARE(assistant.memory().stored_episode_caches, int64_t{2});
    }
    Assistant assistant(dir);
    (void)assistant.load({kModelDir, "cpu", "f32"});
    (void)assistant.open_conversation(id);
    const MemoryRestore restored = assistant.restore_memory();
    QVERIFY(restored.attempted);
    std::set<int32_t> prepared;
    int steps = 0;
    while (const auto step = assistant.prepare_memory_step()) {
      QCOMPARE(step->stage, TurnProgress::Stage::kPreparing);  // the clustering was stored
      prepared.insert(step->episode);
      QVERIFY2(++steps < 300, "the preparation does not end");
    }
    QVERIFY2(!prepared.empty(), "a reopened conversation prepared nothing");
    QVERIFY(!prepared.contains(0));  // stored whole
    QVERIFY(prepared.contains(1));   // stored after one block
    (void)assistant.save_memory();
    const int64_t episodes = assistant.memory().stored_episode_caches;
    QCOMPARE(static_cast<int64_t>(prepared.size()), episodes - 1);
    AssistantSampling sampling;
    sampling.temperature = 0;
    sampling.max_new_tokens = 8;
    const ReplyStats first = assistant.send(user_turns(1)[0], sampling, {});
    QVERIFY(first.episode_step != nullptr);
    QCOMPARE(static_cast<int64_t>(first.episode_step->episodes.size()), episodes);
    QVERIFY2(first.reused_tokens > 0, "the first question built its episode");
    QVERIFY(first.memory_note.find("clustered") == std::string::npos);
    QVERIFY(first.memory_note.find("rebuilt") == std::string::npos);
  }

  // The app's side (Assistant): a long message shows its prefill's progress, stop() ends the turn
  // after the current block, the store keeps the message and an empty answer, the save stores
  // what is cached without finishing the stopped prefill, and the next message goes on from it.
  void theAssistantStopsALongPrefillAndGoesOnFromIt() {
    QTemporaryDir profile;
    Assistant assistant(fs::path(profile.path().toStdString()));
    (void)assistant.load({kModelDir, "cpu", "f32"});
    assistant.set_memory_policy({"full", 0});
    std::string long_text;
    for (const std::string& t : user_turns(300))
      long_text += t + " ";
    AssistantSampling sampling;
    sampling.temperature = 0;
    sampling.max_new_tokens = 8;
    std::vector<TurnProgress> seen;
    const ReplyStats stopped = assistant.send(long_text, sampling, {}, [&](const TurnProgress& p) {
      seen.push_back(p);
      assistant.stop();  // as the Stop button would, from the UI thread
    });
    QCOMPARE(stopped.stop_reason, std::string("cancelled"));
    QVERIFY(stopped.text.empty());
    QCOMPARE(stopped.generated_tokens, int64_t{0});
    QCOMPARE(seen.size(), size_t{1});  // one block, then the stop
    QCOMPARE(seen[0].stage, TurnProgress::Stage::kReading);
    QVERIFY2(seen[0].total > 3 * seen[0].done,
             qPrintable(QString("%1 of %2").arg(seen[0].done).arg(seen[0].total)));
    const std::vector<ConversationMessage> stored = assistant.messages();
    QCOMPARE(stored.size(), size_t{2});
    QCOMPARE(stored[1].role, std::string("assistant"));
    QVERIFY(stored[1].text.empty());
    const MemorySave save = assistant.save_memory();
    QCOMPARE(save.completed_tokens, int64_t{0});
    QCOMPARE(save.tokens, seen[0].done);

    const ReplyStats next = assistant.send("and then?", sampling, {});
    QCOMPARE(next.reused_tokens, seen[0].done);
    QVERIFY(next.stop_reason != "cancelled");
    QVERIFY(next.generated_tokens > 0);
  }

  // epicache:embed=1 in a chat: the windows and the query are embedded as hashed word stems (no
  // forward), topics cluster apart and a question goes to its topic's episode; the store keeps
  // the vectors under the lexical model, so a chat under the model's own embedding clusters anew.
  void aLexicalChatRoutesByTopicAndStoresItsVectorsApart() {
    const std::vector<std::pair<std::string, std::string>> topics = {
        {"my chess opening gambit lost a knight", "castle early and guard the knight"},
        {"the garden tomato seedlings need compost", "water the tomato seedlings at dawn"},
        {"my guitar amplifier hums on every chord", "check the guitar cable and amplifier"},
        {"we moored the sailboat in the harbour", "drop anchor before the harbour tide"}};
    std::vector<ChatMessage> history;
    for (const auto& [user, assistant] : topics) {
      for (int i = 0; i < 12; ++i) {
        history.push_back({"user", user});
        history.push_back({"assistant", assistant});
      }
    }
    QTemporaryDir dir;
    storage::Database db(fs::path(dir.path().toStdString()));
    ConversationStore store(db);
    ChatSession session(*model_, {}, {"epicache:embed=1", 256});
    QCOMPARE(session.embedding_model(), std::string(kLexicalEmbeddingModel));
    session.set_history(history);
    const ChatReply r = session.reply("which knight did the chess gambit cost me?", greedy(8), {});
    QVERIFY(r.route.clustered);
    const EpisodeRouter& router = *session.episodes();
    const LexicalEmbedder stems({});
    for (size_t w = 0; w < router.window_texts().size(); ++w)
      QCOMPARE(router.window_embeddings()[w], stems.embed(router.window_texts()[w]));
    // Every episode holds one topic's windows (a window is two of one topic's exchanges); the
    // question went to the chess one.
    for (const ChatEpisode& e : router.episodes()) {
      std::set<size_t> topic;
      for (size_t w : e.windows)
        if (w < 24) topic.insert(w / 6);
      QCOMPARE(topic.size(), size_t{1});
    }
    const ChatEpisode& routed = router.episodes()[static_cast<size_t>(r.route.episode)];
    QVERIFY(!routed.windows.empty());
    QCOMPARE(routed.windows.front() / 6, size_t{0});
    store.save("lexical", session);

    ChatSession again(*model_, {}, {"epicache:embed=1", 256});
    const auto restored = store.restore("lexical", again);
    QVERIFY(restored && restored->episodes_restored);
    QCOMPARE(again.episodes()->window_embeddings(), router.window_embeddings());
    ChatSession model_states(*model_, {}, {"epicache", 256});
    QCOMPARE(model_states.embedding_model(), model_->fingerprint);
    const auto other = store.restore("lexical", model_states);
    QVERIFY(other.has_value());
    QVERIFY(!other->episodes_restored);
  }

  void episodesSurviveTheStoreAndRouteAsBefore() {
    QTemporaryDir dir;
    storage::Database db(fs::path(dir.path().toStdString()));
    ConversationStore store(db);
    ChatSession session(*model_, {}, {"epicache", 256});
    const std::vector<std::string> turns = user_turns(24);
    for (size_t i = 0; i + 1 < turns.size(); ++i)
      (void)session.reply(turns[i], greedy(8), {});
    QVERIFY(session.episodes()->clustered());
    store.save("c", session);

    ChatSession restored(*model_, {}, {"epicache", 256});
    const auto r = store.restore("c", restored);
    QVERIFY(r.has_value());
    QVERIFY(r->episodes_restored);
    // Every episode's cache came back (tests/test_episode_kv_store.cpp has the details).
    QVERIFY2(r->kv_restored, r->rebuild_reason.c_str());
    QCOMPARE(r->rebuild_cause, KvRebuildCause::kNone);
    QCOMPARE(r->episode_caches_restored,
             static_cast<int64_t>(session.episode_kv_pool()->episodes().size()));
    const auto& a = session.episodes()->episodes();
    const auto& b = restored.episodes()->episodes();
    QCOMPARE(b.size(), a.size());
    for (size_t e = 0; e < a.size(); ++e) {
      QCOMPARE(b[e].centroid, a[e].centroid);
      QCOMPARE(b[e].windows, a[e].windows);
      QCOMPARE(b[e].patch_source, a[e].patch_source);
      QCOMPARE(b[e].created, a[e].created);
    }
    QCOMPARE(restored.episodes()->window_embeddings(), session.episodes()->window_embeddings());
    // The next turn goes where it would have gone without the restart, to the stored cache.
    const ChatReply before = session.reply(turns.back(), greedy(8), {});
    const ChatReply after = restored.reply(turns.back(), greedy(8), {});
    QCOMPARE(after.route.episode, before.route.episode);
    QCOMPARE(after.reused_tokens, before.reused_tokens);
    QCOMPARE(after.generation.tokens, before.generation.tokens);
    QCOMPARE(restored.episode_builds(), int64_t{0});
    QVERIFY(is_prefix(last_prompt(*model_, restored), restored.cached_ids()));
  }

 private:
  std::unique_ptr<LoadedModel> model_;
  QTemporaryDir spill_;
  int64_t last_episodes_ = 0;
};

QTEST_GUILESS_MAIN(ChatEpisodesTest)
#include "test_chat_episodes.moc"
