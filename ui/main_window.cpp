#include "ui/main_window.h"

#include <QLabel>

namespace engram::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("Engram"));
  auto* label = new QLabel(tr("Engram — memory as KV caches"), this);
  label->setAlignment(Qt::AlignCenter);
  setCentralWidget(label);
  resize(1100, 720);
}

}  // namespace engram::ui
