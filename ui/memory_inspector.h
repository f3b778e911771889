// The memory inspector panel: every memory unit of the open conversation with its token count,
// where its KV lives, its bytes, version and state, and the totals per location. It redraws from
// each MemorySnapshot the worker sends (every ~100 ms while a reply streams).
#pragma once

#include <QAbstractTableModel>
#include <QWidget>

#include "core/engine/assistant.h"

class QLabel;
class QTableView;

namespace engram::ui {

class MemoryUnitsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kUnit, kTokens, kLocation, kBytes, kVersion, kState, kText, kColumns };
  explicit MemoryUnitsModel(QObject* parent = nullptr);

  void set_snapshot(const MemorySnapshot& snapshot);
  const MemorySnapshot& snapshot() const { return snapshot_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

 private:
  MemorySnapshot snapshot_;
};

class MemoryInspector : public QWidget {
  Q_OBJECT

 public:
  explicit MemoryInspector(QWidget* parent = nullptr);
  MemoryUnitsModel* model() const { return model_; }
  QString totals_text() const;

 public Q_SLOTS:
  void setSnapshot(const engram::MemorySnapshot& snapshot);

 Q_SIGNALS:
  void snapshotShown(const engram::MemorySnapshot& snapshot);

 private:
  MemoryUnitsModel* model_;
  QTableView* table_;
  QLabel* totals_;
};

QString format_bytes_short(int64_t bytes);

}  // namespace engram::ui
