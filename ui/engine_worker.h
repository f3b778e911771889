// The engine's home in the app (GPT4All's ChatLLM pattern): a QObject living on its own QThread
// that owns the Assistant. The UI calls its slots through queued connections (or
// QMetaObject::invokeMethod) and hears back through signals, so the UI thread never waits on the
// model. The one direct call is stop(), which only raises an atomic flag the generator polls.
#pragma once

#include <QObject>
#include <QString>
#include <QThread>
#include <QVector>
#include <atomic>
#include <memory>

#include "core/engine/assistant.h"

Q_DECLARE_METATYPE(engram::ModelInfo)
Q_DECLARE_METATYPE(engram::ModelLoadRequest)
Q_DECLARE_METATYPE(engram::ModelLoadProgress)
Q_DECLARE_METATYPE(engram::AssistantSampling)
Q_DECLARE_METATYPE(engram::ConversationInfo)
Q_DECLARE_METATYPE(engram::OpenedConversation)
Q_DECLARE_METATYPE(engram::ReplyStats)
Q_DECLARE_METATYPE(engram::MemorySnapshot)
Q_DECLARE_METATYPE(engram::MemoryRestore)
Q_DECLARE_METATYPE(engram::MemorySave)
Q_DECLARE_METATYPE(engram::MemoryPolicyChoice)

namespace engram::ui {

class EngineEvents;

class EngineWorker : public QObject {
  Q_OBJECT

 public:
  // `events` receives the engine's observer calls (it stays on the UI thread).
  explicit EngineWorker(QString profile_dir, EngineEvents* events);
  ~EngineWorker() override;

  // Any thread: asks the running generation to stop after its current token.
  void stop();

 public Q_SLOTS:
  void openProfile();
  void loadModel(const engram::ModelLoadRequest& request);
  void listConversations(const QString& search);
  void newConversation();
  void openConversation(qint64 id);
  void renameConversation(qint64 id, const QString& name);
  void deleteConversation(qint64 id);
  // Conversations `ids` (all when empty) to `file` as JSON or Markdown, and a JSON file back as
  // new conversations (storage/conversation_export.h): answers with conversationsExported /
  // conversationsImported, or fileFailed when nothing was written or imported.
  void exportConversations(const QVector<qint64>& ids, const QString& file, bool markdown);
  void importConversations(const QString& file);
  void send(const QString& text, const engram::AssistantSampling& sampling);
  void regenerate(const engram::AssistantSampling& sampling);
  void refreshMemory();
  // The open conversation's memory policy (the one new conversations get when none is open);
  // answers with memoryPolicyChanged, or error and memoryPolicyChanged with the policy that stays.
  void setMemoryPolicy(const engram::MemoryPolicyChoice& choice);
  // Closes the model and the store (the profile lock goes with it).
  void shutdown();
  // Between turns, while nobody waits (EpiCache): one block of bringing a waiting episode up to
  // the conversation (Assistant::prepare_memory_step), then itself again through the event
  // queue, so a request that comes meanwhile runs first and waits one block at most; a save when
  // nothing is left. Called after each reply, after a conversation is opened, after a model is
  // loaded and after the memory policy changes.
  void prepareMemory();

 Q_SIGNALS:
  void profileOpened(const QString& dir);
  void profileFailed(const QString& message);
  void modelLoadProgress(const engram::ModelLoadProgress& progress);
  void modelLoaded(const engram::ModelInfo& info);
  void modelLoadFailed(const QString& message);
  void conversationsListed(const QVector<engram::ConversationInfo>& conversations,
                           const QString& search);
  void conversationOpened(const engram::OpenedConversation& conversation);
  // The conversation could not be read (e.g. damaged in the store); the open one stays open.
  void conversationOpenFailed(qint64 id, const QString& message);
  void conversationStarted(qint64 id);
  void conversationClosed();
  void replyStarted(bool regenerating);
  void replyText(const QString& text);
  // What the turn does before its first token (core/engine/turn_progress.h), at most every
  // kProgressMs and at each stage's start and end.
  void replyProgress(const QString& what, qint64 done, qint64 total);
  void replyFinished(const engram::ReplyStats& stats);
  void replyFailed(const QString& message, const QString& user_text);
  void memoryChanged(const engram::MemorySnapshot& snapshot);
  // The open conversation's stored KV was read (or could not be used: restore.notice says why).
  void memoryRestored(const engram::MemoryRestore& restore);
  // The conversation's KV went to the store after a reply.
  void memorySaved(const engram::MemorySave& save);
  // prepareMemory's block: what it is doing (core/engine/turn_progress.h), and when it is done.
  void memoryPreparing(const QString& what, qint64 done, qint64 total);
  void memoryPrepared();
  void conversationsChanged();
  void conversationsExported(const QString& file, qint64 count);
  void conversationsImported(const QString& file,
                             const QVector<engram::ConversationInfo>& conversations);
  void fileFailed(const QString& message);
  // The assistant's memory policy now: after setMemoryPolicy, a model load, New and an open.
  void memoryPolicyChanged(const engram::MemoryPolicyChoice& choice);
  void error(const QString& message);

 private:
  bool ready();
  void stream(const std::string& text);
  void progress(const TurnProgress& progress);
  // After an open or a model load: the stored KV into the session (disk -> device).
  void restore_memory();
  // After a reply: the session's KV into the store, so a restart does not re-read the history.
  void save_memory();
  void queue_preparation();

  QString profile_dir_;
  EngineEvents* events_;
  std::unique_ptr<Assistant> assistant_;
  std::atomic<Assistant*> running_{nullptr};
  qint64 last_memory_ms_ = 0;
  qint64 last_progress_ms_ = 0;
  bool prepare_queued_ = false;  // a prepareMemory call waits in the event queue
  bool prepared_ = false;        // prepareMemory did work not saved yet
  int last_progress_stage_ = -1;
};

// Starts `worker` on a new thread owned by `parent`; returns the thread.
QThread* start_engine_thread(EngineWorker* worker, QObject* parent);
// Stops the generation, closes the worker's store and model, ends the thread, deletes the worker.
void stop_engine_thread(EngineWorker* worker, QThread* thread);
void register_worker_metatypes();
// The message the window shows for an engine failure: the first lines of what(), and for any kind
// of out-of-memory (bad_alloc, CUDA, the CPU allocator) a sentence that says so and what to try.
QString readable_error(const std::exception& e);

}  // namespace engram::ui
