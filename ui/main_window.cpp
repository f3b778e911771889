#include "ui/main_window.h"

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QSettings>
#include <QShortcut>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QThread>
#include <QToolBar>
#include <QVBoxLayout>

#include "ui/chat_view.h"
#include "ui/conversation_list.h"
#include "ui/engine_events.h"
#include "ui/engine_worker.h"
#include "ui/episodes_panel.h"
#include "ui/importance_panel.h"
#include "ui/memory_inspector.h"
#include "ui/message_input.h"
#include "ui/model_bar.h"
#include "ui/timeline_panel.h"

namespace engram::ui {

MainWindow::MainWindow(MainWindowOptions options, QWidget* parent)
    : QMainWindow(parent), options_(std::move(options)) {
  setWindowTitle(QStringLiteral("Engram"));
  setObjectName(QStringLiteral("engramMainWindow"));
  settings_ = options_.settings_file.isEmpty()
                  ? new QSettings(this)
                  : new QSettings(options_.settings_file, QSettings::IniFormat, this);

  model_bar_ = new ModelBar(this);
  auto* toolbar = addToolBar(tr("Model"));
  toolbar->setObjectName(QStringLiteral("modelToolBar"));
  toolbar->setMovable(false);
  toolbar->addWidget(model_bar_);

  conversations_ = new ConversationList(this);
  chat_ = new ChatView(this);
  banner_ = new QLabel(this);
  banner_->setObjectName(QStringLiteral("errorBanner"));
  banner_->setWordWrap(true);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  style_banner();
  banner_->setVisible(false);
  input_ = new MessageInput(this);
  send_ = new QPushButton(tr("Send"), this);
  send_->setObjectName(QStringLiteral("sendButton"));
  send_->setMinimumWidth(80);
  auto* input_row = new QHBoxLayout;
  input_row->addWidget(input_, 1);
  input_row->addWidget(send_, 0, Qt::AlignBottom);
  auto* chat_column = new QWidget(this);
  auto* chat_layout = new QVBoxLayout(chat_column);
  chat_layout->setContentsMargins(0, 0, 6, 6);
  chat_layout->addWidget(banner_);
  chat_layout->addWidget(chat_, 1);
  chat_layout->addLayout(input_row);
  input_->setMaximumHeight(input_->sizeHint().height() * 2);

  auto* splitter = new QSplitter(this);
  splitter->setObjectName(QStringLiteral("mainSplitter"));
  splitter->addWidget(conversations_);
  splitter->addWidget(chat_column);
  splitter->setStretchFactor(1, 1);
  splitter->setSizes({230, 700});
  setCentralWidget(splitter);

  timeline_ = new TimelinePanel(this);
  inspector_ = new MemoryInspector(this);
  importance_ = new ImportancePanel(this);
  episodes_ = new EpisodesPanel(this);
  build_menus();
  add_panel(QStringLiteral("memory"), tr("Memory inspector"), inspector_, Qt::RightDockWidgetArea);
  add_panel(QStringLiteral("timeline"), tr("Layer timeline"), timeline_, Qt::BottomDockWidgetArea);
  // KEEP's importance propagation (read from a recompute trace): a tab behind the inspector.
  tabifyDockWidget(panel(QStringLiteral("memory")),
                   add_panel(QStringLiteral("importance"), tr("Importance propagation"),
                             importance_, Qt::RightDockWidgetArea));
  // EpiCache's episodes (read from an episode trace): another tab there.
  tabifyDockWidget(
      panel(QStringLiteral("memory")),
      add_panel(QStringLiteral("episodes"), tr("Episodes"), episodes_, Qt::RightDockWidgetArea));
  panel(QStringLiteral("memory"))->raise();
  setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks |
                 QMainWindow::AllowNestedDocks);
  statusBar()->showMessage(tr("Opening profile…"));

  events_ = new EngineEvents(this);
  worker_ = new EngineWorker(options_.profile_dir, events_);
  thread_ = start_engine_thread(worker_, this);
  connect_worker();

  connect(send_, &QPushButton::clicked, this, [this] { busy_ ? stop() : send(); });
  connect(input_, &MessageInput::submitted, this, &MainWindow::send);
  connect(chat_, &ChatView::regenerateRequested, this, &MainWindow::regenerate);
  connect(model_bar_, &ModelBar::loadRequested, this, &MainWindow::loadModel);
  connect(conversations_, &ConversationList::newRequested, this, &MainWindow::newConversation);
  connect(conversations_, &ConversationList::openRequested, this, [this](qint64 id) {
    if (busy_) {
      showError(tr("Wait for the answer (or press Esc) before switching conversations."));
      conversations_->set_current(current_);
      return;
    }
    user_chose_conversation_ = true;
    QMetaObject::invokeMethod(worker_, [w = worker_, id] { w->openConversation(id); });
  });
  connect(conversations_, &ConversationList::renameRequested, this,
          [this](qint64 id, const QString& name) {
            QMetaObject::invokeMethod(worker_,
                                      [w = worker_, id, name] { w->renameConversation(id, name); });
          });
  connect(conversations_, &ConversationList::deleteRequested, this, [this](qint64 id) {
    if (busy_ && id == current_) {
      showError(tr("Stop the answer before deleting its conversation."));
      return;
    }
    QMetaObject::invokeMethod(worker_, [w = worker_, id] { w->deleteConversation(id); });
  });
  connect(conversations_, &ConversationList::searchChanged, this, [this] { refresh_list(); });

  auto* esc = new QShortcut(QKeySequence(Qt::Key_Escape), this);
  esc->setContext(Qt::WindowShortcut);
  connect(esc, &QShortcut::activated, this, &MainWindow::stop);

  restore_settings();
  QMetaObject::invokeMethod(worker_, &EngineWorker::openProfile);
  if (options_.load_model) loadModel(model_bar_->request());
  input_->setFocus();
}

MainWindow::~MainWindow() {
  save_settings();
  stop_engine_thread(worker_, thread_);
}

void MainWindow::build_menus() {
  auto* file = menuBar()->addMenu(tr("&File"));
  auto* new_action = file->addAction(tr("&New conversation"), this, &MainWindow::newConversation);
  new_action->setShortcut(QKeySequence::New);
  file->addAction(tr("Open &trace file…"), timeline_, &TimelinePanel::loadTraceFile);
  file->addAction(tr("Open &recompute trace…"), importance_, &ImportancePanel::loadTraceFile);
  file->addAction(tr("Open e&pisode trace…"), episodes_, &EpisodesPanel::loadTraceFile);
  file->addSeparator();
  export_action_ =
      file->addAction(tr("&Export conversation…"), this, &MainWindow::exportConversation);
  export_all_action_ =
      file->addAction(tr("Export &all conversations…"), this, &MainWindow::exportAllConversations);
  import_action_ =
      file->addAction(tr("&Import conversations…"), this, &MainWindow::importConversations);
  connect(file, &QMenu::aboutToShow, this, [this] { export_action_->setEnabled(current_ != 0); });
  file->addSeparator();
  auto* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
  quit->setShortcut(QKeySequence::Quit);
  auto* chat = menuBar()->addMenu(tr("&Chat"));
  auto* stop_action = chat->addAction(tr("&Stop generating"), this, &MainWindow::stop);
  stop_action->setShortcut(Qt::Key_Escape);
  stop_action->setShortcutContext(Qt::WidgetShortcut);  // Esc is the window shortcut above
  chat->addAction(tr("&Regenerate last answer"), this, &MainWindow::regenerate);
  chat->addAction(tr("S&ampling…"), this, &MainWindow::edit_sampling);
  auto* view = menuBar()->addMenu(tr("&View"));
  panels_menu_ = view->addMenu(tr("&Panels"));
}

QDockWidget* MainWindow::add_panel(const QString& id, const QString& title, QWidget* panel,
                                   Qt::DockWidgetArea area) {
  auto* dock = new QDockWidget(title, this);
  dock->setObjectName(QStringLiteral("panel_") + id);
  dock->setWidget(panel);
  dock->setAllowedAreas(Qt::AllDockWidgetAreas);
  // A panel added after the saved layout was restored (a policy's panel, registered late) still
  // gets its saved place and visibility.
  const bool restored = layout_restored_ && restoreDockWidget(dock);
  if (!restored) addDockWidget(area, dock);
  // A child added to a window already on screen stays hidden until shown.
  if (!restored && isVisible()) dock->show();
  panels_.insert(id, dock);
  if (panels_menu_) panels_menu_->addAction(dock->toggleViewAction());
  return dock;
}

void MainWindow::connect_worker() {
  connect(worker_, &EngineWorker::profileOpened, this, [this](const QString& dir) {
    profile_open_ = true;
    statusBar()->showMessage(tr("Profile %1").arg(dir));
    refresh_list();
  });
  connect(worker_, &EngineWorker::profileFailed, this, [this](const QString& message) {
    showError(tr("The profile could not be opened: %1").arg(message));
    statusBar()->showMessage(tr("No profile"));
  });
  connect(worker_, &EngineWorker::modelLoadProgress, model_bar_, &ModelBar::set_progress);
  // The memory policy: the person's choice goes to the worker (stored with the open
  // conversation); what the assistant then uses comes back, also after a load, New and an open.
  connect(model_bar_, &ModelBar::memoryPolicyChosen, worker_, &EngineWorker::setMemoryPolicy,
          Qt::QueuedConnection);
  connect(worker_, &EngineWorker::memoryPolicyChanged, model_bar_, &ModelBar::set_memory_policy,
          Qt::QueuedConnection);
  connect(worker_, &EngineWorker::modelLoaded, this, [this](const ModelInfo& info) {
    model_loaded_ = true;
    loaded_model_ = pending_model_;
    model_bar_->set_loaded(info);
    // Only a model that loaded is remembered for the next start.
    settings_->setValue(QStringLiteral("model/dir"),
                        QString::fromStdString(pending_model_.dir.string()));
    settings_->setValue(QStringLiteral("model/device"),
                        QString::fromStdString(pending_model_.device));
    settings_->setValue(QStringLiteral("model/dtype"),
                        QString::fromStdString(pending_model_.dtype));
    Q_EMIT modelReady();
  });
  connect(worker_, &EngineWorker::modelLoadFailed, this, [this](const QString& message) {
    model_loaded_ = model_was_loaded_;  // the worker keeps the previous model
    if (model_loaded_) {
      // The picker shows the model that answers, not the folder that failed.
      model_bar_->set_choice(QString::fromStdString(loaded_model_.dir.string()),
                             QString::fromStdString(loaded_model_.device),
                             QString::fromStdString(loaded_model_.dtype));
    }
    model_bar_->set_failed(message);
    showError(message);
    Q_EMIT modelFailed(message);
  });
  connect(worker_, &EngineWorker::conversationsListed, this,
          [this](const QVector<ConversationInfo>& list, const QString&) {
            conversations_->set_conversations(list);
            // At start, bring back the conversation that was open last time (or the latest),
            // unless the person already asked for another (Ctrl+N, a click, a message).
            if (first_listing_) {
              first_listing_ = false;
              if (user_chose_conversation_) {
                Q_EMIT conversationsRefreshed();
                return;
              }
              qint64 id = settings_->value(QStringLiteral("conversation/last"), 0).toLongLong();
              bool found = false;
              for (const auto& c : list)
                found = found || c.id == id;
              if (!found && !list.isEmpty()) id = list.front().id;
              if ((found || !list.isEmpty()) && current_ == 0) {
                QMetaObject::invokeMethod(worker_, [w = worker_, id] { w->openConversation(id); });
              }
            }
            Q_EMIT conversationsRefreshed();
          });
  connect(worker_, &EngineWorker::conversationsChanged, this, &MainWindow::refresh_list);
  connect(worker_, &EngineWorker::conversationOpened, this, [this](const OpenedConversation& c) {
    if (c.info.id != current_) episodes_->load({});  // live steps belong to one conversation
    current_ = c.info.id;
    conversations_->set_current(current_);
    settings_->setValue(QStringLiteral("conversation/last"), current_);
    // A message sent right after New (or a click) goes to this conversation: the worker takes
    // requests in order. Its two bubbles, already shown, stay below the opened messages.
    QString sending;
    if (busy_ && chat_->count() >= 2 && chat_->last()->text().isEmpty())
      sending = chat_->at(chat_->count() - 2)->text();
    chat_->clear();
    for (const auto& m : c.messages) {
      chat_->add_message(QString::fromStdString(m.role), QString::fromStdString(m.text));
    }
    if (!sending.isNull()) {
      chat_->add_message(QStringLiteral("user"), sending);
      chat_->add_message(QStringLiteral("assistant"), QString());
    }
    if (!c.policy.spec.empty()) model_bar_->set_memory_policy(c.policy);
    if (!c.note.empty()) statusBar()->showMessage(QString::fromStdString(c.note), 10000);
    banner_->setVisible(false);
    Q_EMIT conversationShown(current_);
  });
  connect(worker_, &EngineWorker::conversationOpenFailed, this,
          [this](qint64, const QString& message) {
            conversations_->set_current(current_);  // the selection goes back to what is shown
            showError(message);
          });
  // A send without an open conversation created one; the chat already shows its messages.
  connect(worker_, &EngineWorker::conversationStarted, this, [this](qint64 id) {
    current_ = id;
    conversations_->set_current(current_);
    settings_->setValue(QStringLiteral("conversation/last"), current_);
  });
  connect(worker_, &EngineWorker::conversationClosed, this, [this] {
    current_ = 0;
    chat_->clear();
    episodes_->load({});
    conversations_->set_current(0);
  });
  connect(worker_, &EngineWorker::replyText, this, [this](const QString& text) {
    if (auto* b = chat_->last()) b->append(text);
  });
  connect(worker_, &EngineWorker::memoryPreparing, this,
          [this](const QString& what, qint64, qint64) { statusBar()->showMessage(what, 3000); });
  connect(worker_, &EngineWorker::memoryPrepared, this, [this] {
    statusBar()->showMessage(tr("Every episode is ready for the next question"), 5000);
    Q_EMIT memoryPrepared();
  });
  connect(worker_, &EngineWorker::replyProgress, this,
          [this](const QString& what, qint64 done, qint64 total) {
            if (auto* b = chat_->last(); b && b->text().isEmpty())
              b->set_progress(what, done, total);
          });
  connect(worker_, &EngineWorker::replyFinished, this, [this](const ReplyStats& stats) {
    if (auto* b = chat_->last()) {
      b->set_text(QString::fromStdString(stats.text));
      b->set_stats(stats);
    }
    if (stats.episode_step) episodes_->append_step(*stats.episode_step);
    set_busy(false);
    statusBar()->showMessage(tr("Answered in %1 s").arg(stats.total_ms / 1000.0, 0, 'f', 2), 5000);
    Q_EMIT replyDone();
  });
  connect(worker_, &EngineWorker::replyFailed, this,
          [this](const QString& message, const QString& user_text) {
            chat_->remove_last();  // the answer that did not come
            if (!user_text.isEmpty()) {
              chat_->remove_last();
              if (input_->toPlainText().isEmpty()) input_->setPlainText(user_text);
            }
            set_busy(false);
            showError(message);
            Q_EMIT replyDone();
          });
  connect(worker_, &EngineWorker::memoryChanged, inspector_, &MemoryInspector::setSnapshot);
  connect(worker_, &EngineWorker::memoryRestored, this, [this](const MemoryRestore& r) {
    if (r.restored) {
      statusBar()->showMessage(tr("Memory restored from disk: %1 tokens, %2 in %3 ms")
                                   .arg(r.tokens)
                                   .arg(format_bytes_short(r.bytes))
                                   .arg(r.ms, 0, 'f', 0),
                               10000);
    } else if (r.damaged) {
      showError(QString::fromStdString(r.notice));  // a damaged file deserves the banner
    } else if (!r.notice.empty()) {
      statusBar()->showMessage(QString::fromStdString(r.notice), 15000);
    }
    Q_EMIT memoryRestored(r);
  });
  connect(worker_, &EngineWorker::conversationsExported, this,
          [this](const QString& file, qint64 count) {
            statusBar()->showMessage(tr("Exported %n conversation(s) to %1", nullptr, int(count))
                                         .arg(QDir::toNativeSeparators(file)),
                                     10000);
            Q_EMIT conversationsExported(file, count);
          });
  connect(worker_, &EngineWorker::conversationsImported, this,
          [this](const QString& file, const QVector<ConversationInfo>& imported) {
            statusBar()->showMessage(
                tr("Imported %n conversation(s) from %1", nullptr, int(imported.size()))
                    .arg(QDir::toNativeSeparators(file)),
                10000);
            Q_EMIT conversationsImported(file, imported.size());
          });
  connect(worker_, &EngineWorker::fileFailed, this, [this](const QString& message) {
    statusBar()->clearMessage();
    // Not exec(): the box is window-modal but the event loop (and the engine's signals) go on.
    auto* box = new QMessageBox(QMessageBox::Warning, tr("Engram"), message, QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("fileErrorBox"));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
    Q_EMIT fileActionFailed(message);
  });
  connect(worker_, &EngineWorker::error, this, &MainWindow::showError);
  connect(events_, &EngineEvents::layerIntervals, timeline_, &TimelinePanel::addIntervals);
  connect(events_, &EngineEvents::retrievalMap, timeline_, &TimelinePanel::addRetrievalMap);
}

void MainWindow::refresh_list() {
  const QString search = conversations_->search_text();
  QMetaObject::invokeMethod(worker_, [w = worker_, search] { w->listConversations(search); });
}

void MainWindow::set_busy(bool busy) {
  busy_ = busy;
  chat_->set_busy(busy);
  send_->setText(busy ? tr("Stop") : tr("Send"));
  send_->setToolTip(busy ? tr("Stop generating (Esc)") : tr("Send (Enter)"));
  Q_EMIT busyChanged(busy);
}

void MainWindow::send() {
  const QString text = input_->toPlainText().trimmed();
  if (text.isEmpty()) return;
  if (busy_) return;
  input_->clear();
  sendText(text);
}

void MainWindow::sendText(const QString& text) {
  if (busy_) return;
  if (!model_loaded_) {
    input_->setPlainText(text);
    showError(tr("No model is loaded yet: wait for it to load or choose one in the model bar."));
    return;
  }
  banner_->setVisible(false);
  user_chose_conversation_ = true;
  chat_->add_message(QStringLiteral("user"), text);
  chat_->add_message(QStringLiteral("assistant"), QString());
  set_busy(true);
  const AssistantSampling s = request_sampling();
  QMetaObject::invokeMethod(worker_, [w = worker_, text, s] { w->send(text, s); });
}

void MainWindow::stop() {
  if (busy_) worker_->stop();
}

void MainWindow::regenerate() {
  if (busy_ || !model_loaded_ || !chat_->last() ||
      chat_->last()->role() != QLatin1String("assistant"))
    return;
  banner_->setVisible(false);
  chat_->remove_last();
  chat_->add_message(QStringLiteral("assistant"), QString());
  set_busy(true);
  const AssistantSampling s = request_sampling();
  QMetaObject::invokeMethod(worker_, [w = worker_, s] { w->regenerate(s); });
}

void MainWindow::newConversation() {
  if (busy_) {
    showError(tr("Wait for the answer (or press Esc) before starting a new conversation."));
    return;
  }
  current_ = 0;
  user_chose_conversation_ = true;
  chat_->clear();
  episodes_->load({});
  QMetaObject::invokeMethod(worker_, &EngineWorker::newConversation);
  input_->setFocus();
}

QString MainWindow::choose_file(bool save, const QString& suggested) {
  if (file_chooser_) return file_chooser_(save, suggested);
  QFileDialog dialog(this, save ? tr("Export conversations") : tr("Import conversations"));
  dialog.setAcceptMode(save ? QFileDialog::AcceptSave : QFileDialog::AcceptOpen);
  if (save) {
    dialog.setNameFilters(
        {tr("JSON, can be imported again (*.json)"), tr("Markdown, to read (*.md)")});
    dialog.setDefaultSuffix(QStringLiteral("json"));
    connect(&dialog, &QFileDialog::filterSelected, &dialog, [&dialog](const QString& filter) {
      dialog.setDefaultSuffix(filter.contains(QLatin1String("*.md")) ? QStringLiteral("md")
                                                                     : QStringLiteral("json"));
    });
    dialog.selectFile(suggested);
  } else {
    dialog.setFileMode(QFileDialog::ExistingFile);
    dialog.setNameFilters({tr("Engram conversations (*.json)"), tr("All files (*)")});
    dialog.setDirectory(suggested);
  }
  if (dialog.exec() != QDialog::Accepted || dialog.selectedFiles().isEmpty()) return {};
  return dialog.selectedFiles().front();
}

void MainWindow::export_to_file(const QVector<qint64>& ids, const QString& suggested) {
  const QString dir =
      settings_
          ->value(QStringLiteral("files/dir"),
                  QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation))
          .toString();
  const QString path = choose_file(true, QDir(dir).filePath(suggested));
  if (path.isEmpty()) return;
  const QString suffix = QFileInfo(path).suffix().toLower();
  const bool markdown = suffix == QLatin1String("md") || suffix == QLatin1String("markdown");
  settings_->setValue(QStringLiteral("files/dir"), QFileInfo(path).absolutePath());
  statusBar()->showMessage(tr("Exporting to %1…").arg(QDir::toNativeSeparators(path)));
  QMetaObject::invokeMethod(
      worker_, [w = worker_, ids, path, markdown] { w->exportConversations(ids, path, markdown); });
}

void MainWindow::exportConversation() {
  if (current_ == 0) {
    showError(tr("Open a conversation to export it, or export all conversations."));
    return;
  }
  QString name = tr("conversation");
  for (int row = 0; row < conversations_->count(); ++row) {
    if (conversations_->list()->item(row)->data(Qt::UserRole).toLongLong() == current_)
      name = conversations_->name_at(row);
  }
  // A title may hold characters a file name cannot.
  name.replace(QRegularExpression(QStringLiteral("[/\\\\:*?\"<>|]")), QStringLiteral("_"));
  export_to_file({current_}, name + QStringLiteral(".json"));
}

void MainWindow::exportAllConversations() {
  export_to_file({}, QStringLiteral("engram-conversations.json"));
}

void MainWindow::importConversations() {
  const QString dir =
      settings_
          ->value(QStringLiteral("files/dir"),
                  QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation))
          .toString();
  const QString path = choose_file(false, dir);
  if (path.isEmpty()) return;
  settings_->setValue(QStringLiteral("files/dir"), QFileInfo(path).absolutePath());
  statusBar()->showMessage(tr("Importing %1…").arg(QDir::toNativeSeparators(path)));
  QMetaObject::invokeMethod(worker_, [w = worker_, path] { w->importConversations(path); });
}

void MainWindow::loadModel(const ModelLoadRequest& request) {
  if (busy_) {
    showError(tr("Wait for the answer before loading another model."));
    return;
  }
  model_was_loaded_ = model_loaded_;
  model_loaded_ = false;
  model_bar_->set_loading(true);
  pending_model_ = request;
  QMetaObject::invokeMethod(worker_, [w = worker_, request] { w->loadModel(request); });
}

void MainWindow::style_banner() {
  // A red banner in either palette: light text on dark red when the system palette is dark.
  const bool dark = palette().color(QPalette::Window).lightness() < 128;
  banner_->setStyleSheet(
      dark ? QStringLiteral("QLabel { background: #5a1d18; color: #ffdcd6; border: 1px solid "
                            "#a8493f; border-radius: 4px; padding: 6px; }")
           : QStringLiteral("QLabel { background: #fde8e6; color: #7a1c14; border: 1px solid "
                            "#e0a09a; border-radius: 4px; padding: 6px; }"));
}

void MainWindow::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange) style_banner();
  QMainWindow::changeEvent(event);
}

void MainWindow::showError(const QString& message) {
  banner_->setText(message);
  banner_->setVisible(!message.isEmpty());  // an empty message clears the banner
}

QString MainWindow::error_text() const {
  return banner_->isVisible() ? banner_->text() : QString();
}

AssistantSampling MainWindow::request_sampling() const {
  AssistantSampling s = sampling_;
  // Seed 0 means a new seed for every answer, so Regenerate gives another answer; a chosen seed
  // makes answers reproducible.
  if (s.seed == 0) s.seed = QRandomGenerator::global()->generate64() | 1;
  return s;
}

void MainWindow::set_sampling(const AssistantSampling& s) {
  sampling_ = s;
}

void MainWindow::edit_sampling() {
  QDialog dialog(this);
  dialog.setWindowTitle(tr("Sampling"));
  auto* form = new QFormLayout(&dialog);
  auto* temperature = new QDoubleSpinBox(&dialog);
  temperature->setRange(0, 2);
  temperature->setSingleStep(0.05);
  temperature->setValue(sampling_.temperature);
  auto* top_k = new QSpinBox(&dialog);
  top_k->setRange(0, 1000);
  top_k->setValue(static_cast<int>(sampling_.top_k));
  auto* top_p = new QDoubleSpinBox(&dialog);
  top_p->setRange(0.01, 1);
  top_p->setSingleStep(0.01);
  top_p->setValue(sampling_.top_p);
  auto* penalty = new QDoubleSpinBox(&dialog);
  penalty->setRange(1, 2);
  penalty->setSingleStep(0.05);
  penalty->setValue(sampling_.repetition_penalty);
  auto* max_tokens = new QSpinBox(&dialog);
  max_tokens->setRange(1, 32768);
  max_tokens->setValue(static_cast<int>(sampling_.max_new_tokens));
  auto* seed = new QSpinBox(&dialog);
  seed->setRange(0, 1 << 30);
  seed->setValue(static_cast<int>(sampling_.seed));
  form->addRow(tr("Temperature (0 = greedy)"), temperature);
  form->addRow(tr("Top-k (0 = off)"), top_k);
  form->addRow(tr("Top-p"), top_p);
  form->addRow(tr("Repetition penalty"), penalty);
  form->addRow(tr("Max new tokens"), max_tokens);
  form->addRow(tr("Seed (0 = new for each answer)"), seed);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
  form->addRow(buttons);
  connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
  if (dialog.exec() != QDialog::Accepted) return;
  sampling_.temperature = temperature->value();
  sampling_.top_k = top_k->value();
  sampling_.top_p = top_p->value();
  sampling_.repetition_penalty = penalty->value();
  sampling_.max_new_tokens = max_tokens->value();
  sampling_.seed = static_cast<uint64_t>(seed->value());
  save_settings();
}

void MainWindow::restore_settings() {
  QSettings& s = *settings_;
  model_bar_->set_recent_dirs(s.value(QStringLiteral("model/recent")).toStringList());
  model_bar_->set_choice(s.value(QStringLiteral("model/dir")).toString(),
                         s.value(QStringLiteral("model/device"), QStringLiteral("auto")).toString(),
                         s.value(QStringLiteral("model/dtype"), QStringLiteral("auto")).toString());
  sampling_.temperature =
      s.value(QStringLiteral("sampling/temperature"), sampling_.temperature).toDouble();
  sampling_.top_k =
      s.value(QStringLiteral("sampling/top_k"), qlonglong(sampling_.top_k)).toLongLong();
  sampling_.top_p = s.value(QStringLiteral("sampling/top_p"), sampling_.top_p).toDouble();
  sampling_.repetition_penalty =
      s.value(QStringLiteral("sampling/repetition_penalty"), sampling_.repetition_penalty)
          .toDouble();
  sampling_.max_new_tokens =
      s.value(QStringLiteral("sampling/max_new_tokens"), qlonglong(sampling_.max_new_tokens))
          .toLongLong();
  sampling_.seed =
      s.value(QStringLiteral("sampling/seed"), qulonglong(sampling_.seed)).toULongLong();
  if (!restoreGeometry(s.value(QStringLiteral("window/geometry")).toByteArray())) resize(1280, 800);
  if (!restoreState(s.value(QStringLiteral("window/state")).toByteArray())) {
    resizeDocks({panels_.value(QStringLiteral("memory"))}, {500}, Qt::Horizontal);
    resizeDocks({panels_.value(QStringLiteral("timeline"))}, {230}, Qt::Vertical);
  }
  layout_restored_ = true;
}

void MainWindow::save_settings() {
  QSettings& s = *settings_;
  s.setValue(QStringLiteral("model/recent"), model_bar_->recent_dirs());
  s.setValue(QStringLiteral("sampling/temperature"), sampling_.temperature);
  s.setValue(QStringLiteral("sampling/top_k"), qlonglong(sampling_.top_k));
  s.setValue(QStringLiteral("sampling/top_p"), sampling_.top_p);
  s.setValue(QStringLiteral("sampling/repetition_penalty"), sampling_.repetition_penalty);
  s.setValue(QStringLiteral("sampling/max_new_tokens"), qlonglong(sampling_.max_new_tokens));
  s.setValue(QStringLiteral("sampling/seed"), qulonglong(sampling_.seed));
  s.setValue(QStringLiteral("window/geometry"), saveGeometry());
  s.setValue(QStringLiteral("window/state"), saveState());
  s.sync();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  save_settings();
  QMainWindow::closeEvent(event);
}

}  // namespace engram::ui
