#include <QApplication>
#include <QCommandLineParser>
#include <memory>

#include "core/runtime/cpu_threads.h"
#include "core/runtime/host_memory.h"
#include "ui/demo_script.h"
#include "ui/main_window.h"

int main(int argc, char** argv) {
  engram::keep_freed_host_memory();
  engram::use_cpu_threads();
  QApplication app(argc, argv);
  QApplication::setApplicationName(QStringLiteral("Engram"));
  QApplication::setOrganizationName(QStringLiteral("Engram"));
  QApplication::setApplicationVersion(QStringLiteral(ENGRAM_VERSION));
  // Matches the installed io.engram.Engram.desktop, so that desktops show its name and icon.
  QGuiApplication::setDesktopFileName(QStringLiteral("io.engram.Engram"));

  QCommandLineParser parser;
  parser.setApplicationDescription(
      QStringLiteral("Engram: a desktop assistant whose memory is KV caches"));
  parser.addHelpOption();
  parser.addVersionOption();
  QCommandLineOption profile(QStringLiteral("profile"),
                             QStringLiteral("Profile directory (default: the store's default)."),
                             QStringLiteral("DIR"));
  QCommandLineOption settings(QStringLiteral("settings"),
                              QStringLiteral("Settings file (INI) instead of the platform's."),
                              QStringLiteral("FILE"));
  QCommandLineOption demo(QStringLiteral("demo-script"),
                          QStringLiteral("Drive the window from a script (ui/demo_script.h)."),
                          QStringLiteral("FILE"));
  parser.addOptions({profile, settings, demo});
  parser.process(app);

  engram::ui::MainWindowOptions options;
  options.profile_dir = parser.value(profile);
  options.settings_file = parser.value(settings);
  engram::ui::MainWindow window(options);
  window.show();
  std::unique_ptr<engram::ui::DemoScript> script;
  if (parser.isSet(demo)) {
    script = std::make_unique<engram::ui::DemoScript>(&window, parser.value(demo));
    script->start();
  }
  return QApplication::exec();
}
