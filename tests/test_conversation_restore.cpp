// Restore without re-prefill (issue 4): a conversation saved to the store comes back in a fresh
// session with its KV, and the next reply equals one computed over a re-prefilled history while
// prefilling only the new turn. KV of another model or a damaged blob is never used: the cache is
// rebuilt from the stored text and the caller is told why. engram-cli chat --conversation resumes
// across processes. A named shape with random weights and a separate tokenizer (what
// `bench restore --shape` measures on a GPU) round-trips through the same store, and its
// fingerprint follows its weights.
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/engine/chat_session.h"
#include "core/engine/conversation_store.h"
#include "core/engine/generator.h"
#include "gpu/device_timeline.h"
#include "storage/conversation_repository.h"
#include "storage/database.h"
#include "storage/kv_blob_store.h"
#include "support/reference_fixture.h"

using namespace engram;

namespace {

GenerationOptions greedy(int64_t tokens = 12) {
  GenerationOptions o;
  o.max_new_tokens = tokens;
  o.stop_at_eos = false;  // a fixed length exercises more decode steps
  return o;
}

bool same_history(const std::vector<ChatMessage>& a, const std::vector<ChatMessage>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].role != b[i].role || a[i].content != b[i].content) return false;
  }
  return true;
}

double max_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// The tiny shape with the Llama-2 vocabulary, random weights, chatting through the 32k
// tokenizer of the llama-gqa fixture (its ids are rows of the shape's embedding).
LoadedModel tiny_shape(uint64_t seed) {
  ModelSource source;
  source.shape = "tiny-32k";
  source.seed = seed;
  source.tokenizer = test::fixture_model("llama-gqa") / "tokenizer.model";
  return load_model(source, choose_device("cpu", "f32"), {});
}

std::vector<ChatMessage> text_history() {
  return {{"user", "Hello there, how are you today?"},
          {"assistant", "Very well, thank you. I was reading about rivers."},
          {"user", "Tell me about rivers and the sea."},
          {"assistant", "Rivers run to the sea, and the sea gives rain back to the hills."}};
}

}  // namespace

class ConversationRestoreTest : public QObject {
  Q_OBJECT

  LoadedModel model_;

  // A two-turn conversation, saved as `name` in `profile`.
  void talk_and_save(ChatSession& session, const QString& profile, const std::string& name) {
    session.reply("Hello there, how are you today?", greedy(), {});
    session.reply("Tell me about rivers and the sea.", greedy(), {});
    storage::Database db(profile.toStdString());
    ConversationStore(db).save(name, session);
  }
  ConversationRestore restore(const QString& profile, const std::string& name,
                              ChatSession& session) {
    storage::Database db(profile.toStdString());
    auto r = ConversationStore(db).restore(name, session);
    if (!r) throw std::runtime_error("no conversation " + name);
    return *r;
  }
  std::vector<int64_t> rendered_history(const std::vector<ChatMessage>& messages) const {
    const auto ids = model_.chat_template->encode(*model_.tokenizer, messages, false);
    return {ids.begin(), ids.end()};
  }

 private Q_SLOTS:
  void initTestCase() {
    model_ = load_model({test::fixture_model("llama-gqa"), "", 0}, choose_device("cpu", "f32"), {});
    QVERIFY(model_.tokenizer);
  }

  void restoredCacheMatchesRecompute() {
    QTemporaryDir profile;
    ChatSession original(model_);
    talk_and_save(original, profile.path(), "talk");
    const std::vector<int64_t> ids = original.cached_ids();
    const int64_t tokens = original.cached_tokens();

    ChatSession restored(model_);
    const ConversationRestore r = restore(profile.path(), "talk", restored);
    QVERIFY2(r.kv_restored, r.rebuild_reason.c_str());
    QCOMPARE(r.utterances, int64_t{4});
    QCOMPARE(r.cached_tokens, tokens);
    QCOMPARE(r.prefilled_tokens, int64_t{0});
    QVERIFY(same_history(restored.history(), original.history()));
    QCOMPARE(restored.cached_ids(), ids);
    for (int64_t l = 0; l < model_.config.num_layers; ++l) {
      QVERIFY(at::equal(restored.cache().keys(l), original.cache().keys(l)));
      QVERIFY(at::equal(restored.cache().values(l), original.cache().values(l)));
    }
    QVERIFY(at::equal(restored.cache().positions(), original.cache().positions()));

    // The same ids re-prefilled from scratch: what a restore must be equivalent to.
    ChatSession recomputed(model_);
    {
      auto cache =
          std::make_unique<KvCache>(restored.cache().shape(), 1, tokens + 64, at::kFloat, at::kCPU);
      gpu::DeviceTimeline timeline(at::kCPU);
      prefill(*model_.decoder, *cache, ids, 512, timeline, nullptr);
      recomputed.set_history(original.history());
      recomputed.adopt_cache(std::move(cache), ids);
    }

    const std::string next = "And what about gardens?";
    const ChatReply from_original = original.reply(next, greedy(), {});
    const ChatReply from_store = restored.reply(next, greedy(), {});
    const ChatReply from_recompute = recomputed.reply(next, greedy(), {});
    QCOMPARE(from_store.generation.tokens, from_recompute.generation.tokens);
    QCOMPARE(from_store.generation.tokens, from_original.generation.tokens);
    QCOMPARE(from_store.text, from_recompute.text);
    // Only the new turn was prefilled: the history came from the store.
    QVERIFY(from_store.reused_tokens > 0);
    QCOMPARE(from_store.reused_tokens, from_original.reused_tokens);
    QCOMPARE(from_store.generation.prompt_tokens, from_original.generation.prompt_tokens);
    QVERIFY(from_store.generation.prompt_tokens < tokens);
    // Decode-computed (restored) and prefill-computed KV agree to float rounding.
    for (int64_t l = 0; l < model_.config.num_layers; ++l) {
      const double dk = max_difference(restored.cache().keys(l), recomputed.cache().keys(l));
      const double dv = max_difference(restored.cache().values(l), recomputed.cache().values(l));
      QVERIFY2(dk < 1e-4 && dv < 1e-4,
               qPrintable(QString("layer %1: keys %2 values %3").arg(l).arg(dk).arg(dv)));
    }
  }

  void anotherModelsBlobIsRebuiltNotUsed() {
    QTemporaryDir profile;
    ChatSession original(model_);
    talk_and_save(original, profile.path(), "talk");

    // Same shapes, other fingerprint: exactly the case where misuse would go unnoticed.
    const std::string fingerprint = model_.fingerprint;
    model_.fingerprint = "another-model";
    ChatSession session(model_);
    ConversationRestore r;
    try {
      r = restore(profile.path(), "talk", session);
    } catch (...) {
      model_.fingerprint = fingerprint;
      throw;
    }
    model_.fingerprint = fingerprint;
    QVERIFY(!r.kv_restored);
    QVERIFY2(r.rebuild_reason.find("another model") != std::string::npos, r.rebuild_reason.c_str());
    QVERIFY2(r.rebuild_reason.find("another-model") != std::string::npos, r.rebuild_reason.c_str());
    QCOMPARE(r.cached_tokens, int64_t{0});
    QVERIFY(same_history(session.history(), original.history()));
    // Rebuilt from the text, not the stored ids.
    QCOMPARE(session.cached_ids(), rendered_history(original.history()));
    QCOMPARE(r.prefilled_tokens, session.cached_tokens());
    const ChatReply reply = session.reply("And what about gardens?", greedy(), {});
    QVERIFY(reply.reused_tokens > 0);
  }

  void corruptBlobIsReportedAndTextSurvives() {
    QTemporaryDir profile;
    ChatSession original(model_);
    talk_and_save(original, profile.path(), "talk");
    ChatSession other(model_);
    other.reply("A different conversation.", greedy(4), {});
    {
      storage::Database db(profile.path().toStdString());
      ConversationStore(db).save("other", other);
    }

    std::string damaged_file;
    {
      storage::Database db(profile.path().toStdString());
      const auto id = storage::ConversationRepository(db).find_by_name("talk").value().id;
      storage::KvBlobStore blobs(db);
      for (const auto& record : blobs.list(id)) {
        if (record.key.unit.kind != ConversationStore::kRunKind) continue;
        damaged_file = blobs.path_of(record).string();
        std::fstream f(damaged_file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(record.byte_size / 2);
        const char byte = 0x5a;
        f.write(&byte, 1);
      }
    }
    QVERIFY(!damaged_file.empty());

    ChatSession session(model_);
    const ConversationRestore r = restore(profile.path(), "talk", session);
    QVERIFY(!r.kv_restored);
    QVERIFY2(r.rebuild_reason.find("damaged") != std::string::npos, r.rebuild_reason.c_str());
    QVERIFY2(r.rebuild_reason.find(damaged_file) != std::string::npos, r.rebuild_reason.c_str());
    QVERIFY(same_history(session.history(), original.history()));
    QVERIFY(r.prefilled_tokens > 0);
    QVERIFY(session.reply("And what about gardens?", greedy(), {}).reused_tokens > 0);

    // Saving again replaces the damaged blob; the other conversation was never affected.
    {
      storage::Database db(profile.path().toStdString());
      ConversationStore(db).save("talk", session);
    }
    ChatSession again(model_);
    QVERIFY(restore(profile.path(), "talk", again).kv_restored);
    ChatSession unaffected(model_);
    QVERIFY(restore(profile.path(), "other", unaffected).kv_restored);
  }

  void cliChatResumesStoredConversation() {
    QTemporaryDir profile;
    const QString cli = ENGRAM_BINARY_DIR "/app/cli/engram-cli";
    const QStringList args{"chat",
                           "--model",
                           QString::fromStdString(test::fixture_model("llama-gqa").string()),
                           "--device",
                           "cpu",
                           "--max-tokens",
                           "6",
                           "--profile",
                           profile.path(),
                           "--conversation",
                           "notes"};
    auto run = [&](const QByteArray& input) {
      QProcess p;
      p.start(cli, args);
      if (!p.waitForStarted()) return std::pair<int, QString>{-1, p.errorString()};
      p.write(input);
      p.closeWriteChannel();
      p.waitForFinished(300000);
      return std::pair<int, QString>{p.exitCode(), QString::fromUtf8(p.readAllStandardError())};
    };

    const auto [first_rc, first_err] = run("Hello\nHow are you?\n");
    QVERIFY2(first_rc == 0, qPrintable(first_err));
    QVERIFY2(first_err.contains("new conversation 'notes'"), qPrintable(first_err));

    const auto [second_rc, second_err] = run("One more thing\n");
    QVERIFY2(second_rc == 0, qPrintable(second_err));
    const auto restored =
        QRegularExpression(R"(restored 4 turns, (\d+) cached tokens)").match(second_err);
    QVERIFY2(restored.hasMatch(), qPrintable(second_err));
    QVERIFY(restored.captured(1).toLongLong() > 0);
    // The stats line of the resumed turn shows the history served from the cache.
    const auto reused = QRegularExpression(R"(\((\d+) reused\))").match(second_err);
    QVERIFY2(reused.hasMatch() && reused.captured(1).toLongLong() > 0, qPrintable(second_err));

    storage::Database db(profile.path().toStdString(), storage::Access::kReadOnly);
    storage::ConversationRepository conversations(db);
    const auto id = conversations.find_by_name("notes").value().id;
    const auto utterances = conversations.utterances(id);
    QCOMPARE(utterances.size(), size_t{6});
    QCOMPARE(utterances[4].text, std::string("One more thing"));
    QVERIFY(utterances[5].token_end > utterances[4].token_begin);
    QCOMPARE(conversations.find(id)->model_fingerprint, model_.fingerprint);
  }

  // As `bench restore --shape` does it: a history prefilled from text and saved, then the first
  // token of the next answer from the restored KV equals that of a re-prefill of the stored text.
  void shapeModelRoundTripsInTheStore() {
    LoadedModel model = tiny_shape(0);
    QVERIFY(model.tokenizer && model.chat_template);
    QCOMPARE(model.chat_template->kind(), ChatTemplateKind::kLlama2);  // from the fixture folder
    QVERIFY2(model.fingerprint.starts_with("shape:tiny-32k:seed0:"), model.fingerprint.c_str());
    QTemporaryDir profile;
    int64_t tokens = 0;
    {
      ChatSession session(model);
      session.set_history(text_history());
      tokens = session.prefill_history();
      storage::Database db(profile.path().toStdString());
      ConversationStore(db).save("shape", session);
    }
    QVERIFY(tokens > 40);
    {
      storage::Database db(profile.path().toStdString(), storage::Access::kReadOnly);
      const auto records = storage::KvBlobStore(db).list_all();
      QCOMPARE(records.size(), size_t{3});  // one run, its ids, the manifest
      for (const auto& r : records)
        QCOMPARE(r.model_fingerprint, model.fingerprint);
    }

    const std::string next = "And what about gardens?";
    ChatSession restored(model);
    const ConversationRestore r = restore(profile.path(), "shape", restored);
    QVERIFY2(r.kv_restored, r.rebuild_reason.c_str());
    QCOMPARE(r.cached_tokens, tokens);
    const ChatReply from_store = restored.reply(next, greedy(4), {});
    QCOMPARE(from_store.reused_tokens, tokens);

    ChatSession reprefilled(model);
    reprefilled.set_history(text_history());
    const ChatReply from_text = reprefilled.reply(next, greedy(4), {});
    QCOMPARE(from_text.reused_tokens, int64_t{0});
    QCOMPARE(from_text.generation.prompt_tokens, tokens + from_store.generation.prompt_tokens);
    QCOMPARE(from_store.generation.tokens.at(0), from_text.generation.tokens.at(0));
    QCOMPARE(from_store.generation.tokens, from_text.generation.tokens);
  }

  // Same shape and seed: same fingerprint; another seed: other weights, so the stored KV is
  // refused as another model's and rebuilt from text.
  void shapeFingerprintFollowsTheWeights() {
    LoadedModel a = tiny_shape(0);
    LoadedModel again = tiny_shape(0);
    LoadedModel b = tiny_shape(1);
    QCOMPARE(again.fingerprint, a.fingerprint);
    QVERIFY(b.fingerprint != a.fingerprint);
    QVERIFY(b.fingerprint.starts_with("shape:tiny-32k:seed1:"));

    QTemporaryDir profile;
    {
      ChatSession session(a);
      session.set_history(text_history());
      session.prefill_history();
      storage::Database db(profile.path().toStdString());
      ConversationStore(db).save("shape", session);
    }
    ChatSession same(again);
    QVERIFY(restore(profile.path(), "shape", same).kv_restored);
    ChatSession other(b);
    const ConversationRestore r = restore(profile.path(), "shape", other);
    QVERIFY(!r.kv_restored);
    QVERIFY2(r.rebuild_reason.find("another model") != std::string::npos, r.rebuild_reason.c_str());
    QVERIFY(r.prefilled_tokens > 0);
  }

  // The benchmark end to end on the tiny shape: JSON fields, the shape, the KV restored.
  void cliBenchRestoreWithShape() {
    QTemporaryDir tmp;
    const QString json = tmp.filePath("restore.json");
    QProcess p;
    p.start(
        ENGRAM_BINARY_DIR "/app/cli/engram-cli",
        {"bench", "restore", "--shape", "tiny-32k", "--tokenizer",
         QString::fromStdString((test::fixture_model("llama-gqa") / "tokenizer.model").string()),
         "--history-tokens", "400", "--turn-tokens", "100", "--repeat", "1", "--device", "cpu",
         "--json", json});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    std::ifstream in(json.toStdString());
    const nlohmann::json out = nlohmann::json::parse(in);
    QCOMPARE(out.at("shape").get<std::string>(), std::string("tiny-32k"));
    QVERIFY(out.at("model_dir").is_null());
    QVERIFY(out.at("model_fingerprint").get<std::string>().starts_with("shape:tiny-32k:seed0:"));
    const int64_t tokens = out.at("history_tokens").get<int64_t>();
    QVERIFY(tokens >= 400);
    QCOMPARE(out.at("restored").at("reused_tokens").get<int64_t>(), tokens);
    QVERIFY(out.at("reprefilled").at("prefilled_tokens").get<int64_t>() > tokens);
    // [2, layers, kv heads, tokens, head dim] f32 plus the int64 ids, and the manifest's int64
    // stream index per working-set slot (full KV: one row).
    QCOMPARE(out.at("kv_blob_bytes").get<int64_t>(),
             2 * 2 * 2 * tokens * 16 * 4 + tokens * 8 + tokens * 8);
    QVERIFY(out.at("same_first_token").get<bool>());
  }
};

QTEST_GUILESS_MAIN(ConversationRestoreTest)
#include "test_conversation_restore.moc"
