// The Engram main window: the conversation list, the chat with its input, the model bar, and a
// dock area for research panels (layer timeline, memory inspector, KEEP's importance propagation
// and EpiCache's episodes; a later panel registers itself through add_panel()).
// The engine lives on a worker thread (engine_worker.h); this window never waits on it.
#pragma once

#include <QMainWindow>
#include <QMap>
#include <QPointer>
#include <functional>

#include "core/engine/assistant.h"

class QAction;
class QDockWidget;
class QLabel;
class QMenu;
class QPushButton;
class QSettings;
class QThread;

namespace engram::ui {

class ChatView;
class ConversationList;
class EngineEvents;
class EngineWorker;
class EpisodesPanel;
class ImportancePanel;
class MemoryInspector;
class MessageInput;
class ModelBar;
class TimelinePanel;

struct MainWindowOptions {
  QString profile_dir;     // empty: the store's default profile
  QString settings_file;   // empty: the platform's QSettings for Engram
  bool load_model = true;  // load the remembered (or bundled) model at start
};

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(MainWindowOptions options = {}, QWidget* parent = nullptr);
  ~MainWindow() override;

  // Adds a dockable panel (also listed in View → Panels). `id` names it in the saved layout; a
  // panel added after construction is put back where the saved layout had it.
  QDockWidget* add_panel(const QString& id, const QString& title, QWidget* panel,
                         Qt::DockWidgetArea area);
  QDockWidget* panel(const QString& id) const { return panels_.value(id); }

  ChatView* chat() const { return chat_; }
  ConversationList* conversations() const { return conversations_; }
  MessageInput* input() const { return input_; }
  ModelBar* model_bar() const { return model_bar_; }
  TimelinePanel* timeline() const { return timeline_; }
  MemoryInspector* inspector() const { return inspector_; }
  ImportancePanel* importance() const { return importance_; }
  EpisodesPanel* episodes() const { return episodes_; }
  bool busy() const { return busy_; }
  bool model_loaded() const { return model_loaded_; }
  bool profile_open() const { return profile_open_; }
  qint64 current_conversation() const { return current_; }
  QString error_text() const;
  QLabel* error_banner() const { return banner_; }
  QPushButton* send_button() const { return send_; }
  QMenu* panels_menu() const { return panels_menu_; }
  AssistantSampling sampling() const { return sampling_; }
  void set_sampling(const AssistantSampling& sampling);
  // File → Export/Import ask this for a path (empty: cancelled); `suggested` is a file to save or
  // the folder to import from. By default a file dialog; tests and scripts replace it, since the
  // dialog is modal.
  using FileChooser = std::function<QString(bool save, const QString& suggested)>;
  void set_file_chooser(FileChooser chooser) { file_chooser_ = std::move(chooser); }
  QAction* export_conversation_action() const { return export_action_; }
  QAction* export_all_action() const { return export_all_action_; }
  QAction* import_action() const { return import_action_; }

 public Q_SLOTS:
  void send();  // sends the input box's text
  void sendText(const QString& text);
  void stop();
  void regenerate();
  void newConversation();
  // The open conversation, or all, to a JSON (re-importable) or Markdown (.md) file; a JSON file's
  // conversations into the profile as new ones. The worker does the work; errors open a message
  // box.
  void exportConversation();
  void exportAllConversations();
  void importConversations();
  void loadModel(const engram::ModelLoadRequest& request);
  void showError(const QString& message);

 Q_SIGNALS:
  void modelReady();
  void modelFailed(const QString& message);
  void replyDone();
  void conversationShown(qint64 id);
  void conversationsRefreshed();
  void busyChanged(bool busy);
  // The worker brought every waiting episode up to the conversation between turns (EpiCache).
  void memoryPrepared();
  // The open conversation's stored KV was read into the engine, or could not be used.
  void memoryRestored(const engram::MemoryRestore& restore);
  void conversationsExported(const QString& file, qint64 count);
  void conversationsImported(const QString& file, qint64 count);
  void fileActionFailed(const QString& message);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void changeEvent(QEvent* event) override;

 private:
  void build_menus();
  void connect_worker();
  void set_busy(bool busy);
  void restore_settings();
  void save_settings();
  void edit_sampling();
  void refresh_list();
  void style_banner();
  AssistantSampling request_sampling() const;
  QString choose_file(bool save, const QString& suggested);
  void export_to_file(const QVector<qint64>& ids, const QString& suggested);

  MainWindowOptions options_;
  QSettings* settings_;
  EngineEvents* events_;
  EngineWorker* worker_;
  QThread* thread_;
  ChatView* chat_;
  ConversationList* conversations_;
  MessageInput* input_;
  QPushButton* send_;
  QLabel* banner_;
  ModelBar* model_bar_;
  TimelinePanel* timeline_;
  MemoryInspector* inspector_;
  ImportancePanel* importance_;
  EpisodesPanel* episodes_;
  QMenu* panels_menu_ = nullptr;
  QAction* export_action_ = nullptr;
  QAction* export_all_action_ = nullptr;
  QAction* import_action_ = nullptr;
  FileChooser file_chooser_;
  QMap<QString, QDockWidget*> panels_;
  AssistantSampling sampling_;
  ModelLoadRequest pending_model_;
  ModelLoadRequest loaded_model_;
  bool busy_ = false;
  bool model_loaded_ = false;
  bool model_was_loaded_ = false;
  bool profile_open_ = false;
  bool first_listing_ = true;
  bool layout_restored_ = false;
  bool user_chose_conversation_ = false;  // before the first listing came: no automatic reopen
  qint64 current_ = 0;
};

}  // namespace engram::ui
