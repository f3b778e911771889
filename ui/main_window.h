// The Engram main window. The chat, conversation list and panels arrive with issue 6.
#pragma once

#include <QMainWindow>

namespace engram::ui {

class MainWindow : public QMainWindow {
  Q_OBJECT

 public:
  explicit MainWindow(QWidget* parent = nullptr);
};

}  // namespace engram::ui
