#include "ui/engine_worker.h"

#include <QDateTime>
#include <new>

#include "storage/store_error.h"
#include "ui/engine_events.h"

namespace engram::ui {
namespace {

// Live memory updates while generating: often enough to look live, rare enough to cost nothing.
constexpr qint64 kMemoryUpdateMs = 100;
constexpr qint64 kProgressMs = 100;  // the reply's progress line, at most this often

QString message_of(const std::exception& e) {
  return QString::fromStdString(e.what());
}

}  // namespace

QString readable_error(const std::exception& e) {
  const QString what = message_of(e);
  // Out of memory reaches us as bad_alloc or as torch's text: "CUDA out of memory. Tried to
  // allocate …" (CUDA), "DefaultCPUAllocator: not enough memory: …" (CPU), or cuBLAS failing to
  // get its workspace.
  const bool oom = dynamic_cast<const std::bad_alloc*>(&e) ||
                   what.contains(QStringLiteral("out of memory"), Qt::CaseInsensitive) ||
                   what.contains(QStringLiteral("not enough memory"), Qt::CaseInsensitive) ||
                   what.contains(QStringLiteral("CUBLAS_STATUS_ALLOC_FAILED"));
  if (oom) {
    const QString first = what.section(QLatin1Char('\n'), 0, 0).trimmed();
    return QObject::tr(
               "Out of memory%1. Try a smaller model, fewer new tokens, or the CPU; the "
               "conversation is kept.")
        .arg(first.isEmpty() || first == QLatin1String("std::bad_alloc")
                 ? QString()
                 : QStringLiteral(" (%1)").arg(first));
  }
  return what.section(QLatin1Char('\n'), 0, 2);
}

void register_worker_metatypes() {
  register_engine_metatypes();
  qRegisterMetaType<engram::ModelInfo>();
  qRegisterMetaType<engram::ModelLoadRequest>();
  qRegisterMetaType<engram::ModelLoadProgress>();
  qRegisterMetaType<engram::AssistantSampling>();
  qRegisterMetaType<engram::ConversationInfo>();
  qRegisterMetaType<QVector<engram::ConversationInfo>>();
  qRegisterMetaType<engram::OpenedConversation>();
  qRegisterMetaType<engram::ReplyStats>();
  qRegisterMetaType<engram::MemorySnapshot>();
  qRegisterMetaType<engram::MemoryRestore>();
  qRegisterMetaType<engram::MemorySave>();
  qRegisterMetaType<engram::MemoryPolicyChoice>();
}

EngineWorker::EngineWorker(QString profile_dir, EngineEvents* events)
    : profile_dir_(std::move(profile_dir)), events_(events) {
  register_worker_metatypes();
}

EngineWorker::~EngineWorker() = default;

void EngineWorker::stop() {
  if (Assistant* a = running_.load()) a->stop();
}

bool EngineWorker::ready() {
  if (assistant_) return true;
  Q_EMIT error(tr("The profile is not open."));
  return false;
}

void EngineWorker::openProfile() {
  try {
    assistant_ = std::make_unique<Assistant>(profile_dir_.toStdString());
    assistant_->set_observer(events_);
    running_ = assistant_.get();
    Q_EMIT profileOpened(QString::fromStdString(assistant_->profile_dir().string()));
  } catch (const std::exception& e) {
    Q_EMIT profileFailed(message_of(e));
  }
}

void EngineWorker::loadModel(const ModelLoadRequest& request) {
  if (!ready()) return;
  try {
    const ModelInfo info = assistant_->load(
        request, [this](const ModelLoadProgress& p) { Q_EMIT modelLoadProgress(p); });
    Q_EMIT modelLoaded(info);
    Q_EMIT memoryPolicyChanged(assistant_->memory_policy());
    refreshMemory();
    restore_memory();     // the open conversation's KV for the new model (or why it cannot be used)
    queue_preparation();  // what it lacks (another model's caches) is built while nobody waits
  } catch (const std::exception& e) {
    const QString dir = QString::fromStdString(
        request.dir.empty() ? Assistant::bundled_model_dir().string() : request.dir.string());
    const QString why = readable_error(e);
    // Model errors name the folder already.
    Q_EMIT modelLoadFailed(why.contains(dir)
                               ? tr("Could not load the model: %1").arg(why)
                               : tr("Could not load the model from %1: %2").arg(dir, why));
  }
}

void EngineWorker::listConversations(const QString& search) {
  if (!ready()) return;
  try {
    const auto found = assistant_->search_conversations(search.toStdString());
    Q_EMIT conversationsListed(QVector<ConversationInfo>(found.begin(), found.end()), search);
  } catch (const std::exception& e) {
    Q_EMIT error(tr("Could not list conversations: %1").arg(message_of(e)));
  }
}

void EngineWorker::newConversation() {
  if (!ready()) return;
  try {
    OpenedConversation opened;
    opened.info = assistant_->new_conversation();
    opened.policy = assistant_->memory_policy();  // what the last one used
    Q_EMIT conversationOpened(opened);
    Q_EMIT conversationsChanged();
    refreshMemory();
  } catch (const std::exception& e) {
    Q_EMIT error(tr("Could not create a conversation: %1").arg(message_of(e)));
  }
}

void EngineWorker::openConversation(qint64 id) {
  if (!ready()) return;
  try {
    Q_EMIT conversationOpened(assistant_->open_conversation(id));
    refreshMemory();   // its KV on disk, until...
    restore_memory();  // ...it is read: the text is on screen meanwhile
    // Episodes whose caches the store lacks (a preparation the app did not finish) are built
    // while nobody waits, not by the next question routed there.
    queue_preparation();
  } catch (const storage::DatabaseCorrupt& e) {
    QString name = tr("conversation %1").arg(id);
    try {
      for (const auto& c : assistant_->list_conversations()) {
        if (c.id == id) name = QStringLiteral("“%1”").arg(QString::fromStdString(c.name));
      }
    } catch (const std::exception&) {
      // The id names it well enough.
    }
    Q_EMIT conversationOpenFailed(
        id, tr("The conversation %1 is damaged in the store and cannot be opened; the other "
               "conversations are not affected. (%2)")
                .arg(name, message_of(e)));
  } catch (const std::exception& e) {
    Q_EMIT conversationOpenFailed(
        id, tr("Could not open conversation %1: %2").arg(id).arg(message_of(e)));
  }
}

void EngineWorker::renameConversation(qint64 id, const QString& name) {
  if (!ready()) return;
  try {
    assistant_->rename_conversation(id, name.toStdString());
    Q_EMIT conversationsChanged();
  } catch (const std::exception& e) {
    Q_EMIT error(tr("Could not rename: %1").arg(message_of(e)));
  }
}

void EngineWorker::deleteConversation(qint64 id) {
  if (!ready()) return;
  try {
    const bool was_open = assistant_->current_conversation() == id;
    assistant_->delete_conversation(id);
    if (was_open) Q_EMIT conversationClosed();
    Q_EMIT conversationsChanged();
    refreshMemory();
  } catch (const std::exception& e) {
    Q_EMIT error(tr("Could not delete: %1").arg(message_of(e)));
  }
}

void EngineWorker::exportConversations(const QVector<qint64>& ids, const QString& file,
                                       bool markdown) {
  if (!ready()) return;
  try {
    const qint64 count =
        assistant_->export_conversations(std::vector<int64_t>(ids.begin(), ids.end()),
                                         markdown ? storage::ConversationFileFormat::kMarkdown
                                                  : storage::ConversationFileFormat::kJson,
                                         file.toStdString());
    Q_EMIT conversationsExported(file, count);
  } catch (const std::exception& e) {
    Q_EMIT fileFailed(tr("Could not export to %1: %2").arg(file, message_of(e)));
  }
}

void EngineWorker::importConversations(const QString& file) {
  if (!ready()) return;
  try {
    const auto imported = assistant_->import_conversations(file.toStdString());
    Q_EMIT conversationsImported(file, QVector<ConversationInfo>(imported.begin(), imported.end()));
    Q_EMIT conversationsChanged();
  } catch (const storage::ConversationFileError& e) {
    Q_EMIT fileFailed(tr("Nothing was imported: %1").arg(message_of(e)));
  } catch (const std::exception& e) {
    Q_EMIT fileFailed(tr("Nothing was imported from %1: %2").arg(file, message_of(e)));
  }
}

void EngineWorker::stream(const std::string& text) {
  Q_EMIT replyText(QString::fromStdString(text));
  const qint64 now = QDateTime::currentMSecsSinceEpoch();
  if (now - last_memory_ms_ >= kMemoryUpdateMs) {
    last_memory_ms_ = now;
    Q_EMIT memoryChanged(assistant_->memory());
  }
}

void EngineWorker::progress(const TurnProgress& p) {
  const qint64 now = QDateTime::currentMSecsSinceEpoch();
  const int stage = static_cast<int>(p.stage);
  if (stage == last_progress_stage_ && p.done < p.total && now - last_progress_ms_ < kProgressMs)
    return;
  last_progress_ms_ = now;
  last_progress_stage_ = stage;
  Q_EMIT replyProgress(QString::fromStdString(describe_turn_progress(p)), p.done, p.total);
}

void EngineWorker::send(const QString& text, const AssistantSampling& sampling) {
  if (!ready()) return;
  const bool had_conversation = assistant_->current_conversation().has_value();
  Q_EMIT replyStarted(false);
  last_memory_ms_ = 0;
  last_progress_stage_ = -1;
  try {
    const ReplyStats stats = assistant_->send(
        text.toStdString(), sampling, [this](const std::string& t) { stream(t); },
        [this](const TurnProgress& p) { progress(p); });
    Q_EMIT replyFinished(stats);
    if (!had_conversation) Q_EMIT conversationStarted(*assistant_->current_conversation());
    Q_EMIT conversationsChanged();
    save_memory();
    queue_preparation();
  } catch (const std::exception& e) {
    Q_EMIT replyFailed(readable_error(e), text);
  }
  refreshMemory();
}

void EngineWorker::regenerate(const AssistantSampling& sampling) {
  if (!ready()) return;
  Q_EMIT replyStarted(true);
  last_memory_ms_ = 0;
  last_progress_stage_ = -1;
  try {
    const ReplyStats stats = assistant_->regenerate(
        sampling, [this](const std::string& t) { stream(t); },
        [this](const TurnProgress& p) { progress(p); });
    Q_EMIT replyFinished(stats);
    Q_EMIT conversationsChanged();
    save_memory();
    queue_preparation();
  } catch (const std::exception& e) {
    Q_EMIT replyFailed(readable_error(e), QString());
  }
  refreshMemory();
}

void EngineWorker::restore_memory() {
  try {
    const MemoryRestore r = assistant_->restore_memory();
    if (!r.attempted) return;
    Q_EMIT memoryRestored(r);
    refreshMemory();
  } catch (const std::exception& e) {
    Q_EMIT error(tr("The saved memory of this conversation could not be read; it is rebuilt from "
                    "the text on the next answer. (%1)")
                     .arg(readable_error(e)));
  }
}

void EngineWorker::queue_preparation() {
  if (prepare_queued_) return;
  prepare_queued_ = true;
  QMetaObject::invokeMethod(this, &EngineWorker::prepareMemory, Qt::QueuedConnection);
}

void EngineWorker::prepareMemory() {
  prepare_queued_ = false;
  if (!assistant_) return;
  std::optional<TurnProgress> step;
  try {
    step = assistant_->prepare_memory_step();
  } catch (const std::exception& e) {
    prepared_ = false;
    Q_EMIT error(tr("An episode could not be prepared for the next answer; it is built when a "
                    "question goes to it. (%1)")
                     .arg(readable_error(e)));
    return;
  }
  if (!step) {
    if (prepared_) {
      prepared_ = false;
      save_memory();
      refreshMemory();
      Q_EMIT memoryPrepared();
    }
    return;
  }
  prepared_ = true;
  Q_EMIT memoryPreparing(QString::fromStdString(describe_turn_progress(*step)), step->done,
                         step->total);
  queue_preparation();
}

void EngineWorker::save_memory() {
  try {
    Q_EMIT memorySaved(assistant_->save_memory());
  } catch (const std::exception& e) {
    // The reply and its text are stored; only the KV is not.
    Q_EMIT error(tr("The answer is stored, but the conversation's memory (KV cache) could not be "
                    "saved; after a restart it is rebuilt from the text. (%1)")
                     .arg(readable_error(e)));
  }
}

void EngineWorker::setMemoryPolicy(const MemoryPolicyChoice& choice) {
  if (!ready()) return;
  try {
    assistant_->set_memory_policy(choice);
    // A long conversation moved to EpiCache is clustered and its episodes built now, not by the
    // next question.
    queue_preparation();
  } catch (const std::exception& e) {
    Q_EMIT error(tr("Memory policy “%1”%2 not used: %3")
                     .arg(QString::fromStdString(choice.spec),
                          choice.kv_budget > 0 ? tr(" with a KV budget of %1").arg(choice.kv_budget)
                                               : QString(),
                          message_of(e)));
  }
  // The policy in force either way: the model bar shows it again after a refusal.
  Q_EMIT memoryPolicyChanged(assistant_->memory_policy());
  refreshMemory();
}

void EngineWorker::refreshMemory() {
  if (!assistant_) return;
  try {
    Q_EMIT memoryChanged(assistant_->memory());
  } catch (const std::exception& e) {
    Q_EMIT error(tr("Memory inspector: %1").arg(message_of(e)));
  }
}

QThread* start_engine_thread(EngineWorker* worker, QObject* parent) {
  auto* thread = new QThread(parent);
  thread->setObjectName(QStringLiteral("engram-engine"));
  worker->moveToThread(thread);
  thread->start();
  return thread;
}

void EngineWorker::shutdown() {
  running_ = nullptr;
  assistant_.reset();
}

void stop_engine_thread(EngineWorker* worker, QThread* thread) {
  worker->stop();
  QMetaObject::invokeMethod(worker, &EngineWorker::shutdown, Qt::BlockingQueuedConnection);
  thread->quit();
  thread->wait();
  delete worker;
}

}  // namespace engram::ui
