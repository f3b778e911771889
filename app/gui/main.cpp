#include <QApplication>

#include "ui/main_window.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("Engram"));
  QApplication::setOrganizationName(QStringLiteral("Engram"));
  engram::ui::MainWindow window;
  window.show();
  return QApplication::exec();
}
