#include "ui/memory_inspector.h"

#include <QHeaderView>
#include <QLabel>
#include <QTableView>
#include <QVBoxLayout>

namespace engram::ui {

QString format_bytes_short(int64_t b) {
  if (b >= (1LL << 30)) return QStringLiteral("%1 GiB").arg(b / double(1LL << 30), 0, 'f', 2);
  if (b >= (1LL << 20)) return QStringLiteral("%1 MiB").arg(b / double(1LL << 20), 0, 'f', 2);
  if (b >= 1024) return QStringLiteral("%1 KiB").arg(b / 1024.0, 0, 'f', 1);
  return QStringLiteral("%1 B").arg(b);
}

namespace {

QString state_explained(const std::string& state) {
  if (state == "cached") return QObject::tr("All its tokens have KV in the engine's cache.");
  if (state == "partly cached") {
    return QObject::tr(
        "Some of its tokens have KV in the cache (e.g. the last token of a reply "
        "is never fed back); the rest is computed on the next reply.");
  }
  if (state == "generating") return QObject::tr("The reply being generated now.");
  if (state == "stored") {
    return QObject::tr(
        "Its KV is in the profile's store on disk, not loaded; it is read (not recomputed) "
        "before the next reply.");
  }
  if (state == "partly stored") {
    return QObject::tr(
        "Some of its tokens have KV in the store on disk; the rest is computed on the next "
        "reply.");
  }
  if (state == "text only") {
    return QObject::tr("Only its text exists; its KV is computed (prefilled) on the next reply.");
  }
  if (state == "evicted") {
    return QObject::tr(
        "The memory policy moved all its tokens out of attention: no KV of it is kept, its text "
        "is.");
  }
  if (state == "evicted, KV kept") {
    return QObject::tr(
        "The memory policy moved all its tokens out of attention; their KV is kept where Location "
        "says (disk: the conversation's store; CPU: host memory until the next save), its text "
        "too.");
  }
  if (state == "episode waiting") {
    return QObject::tr(
        "An EpiCache episode's KV cache, waiting for a question routed to it: in page-locked host "
        "memory (pinned CPU) or, when more episodes wait than that memory holds, in the engine's "
        "spill file (disk). A turn routed to it loads it into the GPU working set.");
  }
  if (state == "partly evicted") {
    return QObject::tr(
        "The memory policy moved some of its tokens out of attention (Tokens shows how many "
        "stay); the rest keep their KV.");
  }
  return QString::fromStdString(state);
}

// A unit with KV on the device of which the policy moved some tokens out of attention (a unit
// only partly computed also has fewer tokens in attention than it has: that one is not meant).
bool partly_in_attention(const MemoryUnit& u) {
  const bool on_device = u.location == MemoryLocation::kGpu ||
                         u.location == MemoryLocation::kPinnedCpu ||
                         u.location == MemoryLocation::kCpu;
  return on_device && u.state != "partly cached" && u.attention_tokens < u.tokens;
}

}  // namespace

MemoryUnitsModel::MemoryUnitsModel(QObject* parent) : QAbstractTableModel(parent) {}

void MemoryUnitsModel::set_snapshot(const MemorySnapshot& snapshot) {
  const bool same_rows = snapshot.units.size() == snapshot_.units.size();
  if (!same_rows) beginResetModel();
  snapshot_ = snapshot;
  if (!same_rows) {
    endResetModel();
  } else if (!snapshot_.units.empty()) {
    Q_EMIT dataChanged(index(0, 0), index(rowCount() - 1, kColumns - 1));
  }
}

int MemoryUnitsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(snapshot_.units.size());
}

int MemoryUnitsModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumns;
}

QVariant MemoryUnitsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const MemoryUnit& u = snapshot_.units[static_cast<size_t>(index.row())];
  if (role == Qt::TextAlignmentRole) {
    const bool number =
        index.column() == kTokens || index.column() == kBytes || index.column() == kVersion;
    return QVariant::fromValue(Qt::Alignment(number ? Qt::AlignRight | Qt::AlignVCenter
                                                    : Qt::AlignLeft | Qt::AlignVCenter));
  }
  if (role == Qt::UserRole) {
    if (index.column() == kBytes) return QVariant::fromValue<qlonglong>(u.bytes);
    if (index.column() == kTokens) return QVariant::fromValue<qlonglong>(u.tokens);
  }
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (index.column()) {
    case kUnit:
      // "#3 user": an utterance by its index and speaker; "#4 turn" for the open turn.
      if (role == Qt::ToolTipRole) {
        return QStringLiteral("%1 %2 (%3)")
            .arg(QString::fromStdString(u.kind))
            .arg(u.index)
            .arg(QString::fromStdString(u.role));
      }
      return QStringLiteral("#%1 %2").arg(u.index).arg(
          QString::fromStdString(u.kind == "utterance" ? u.role : u.kind));
    case kTokens:
      if (partly_in_attention(u)) {
        if (role == Qt::ToolTipRole) {
          return tr("%1 of its %2 tokens are in attention (mean over layers and KV heads); the "
                    "memory policy moved the others out, their text is kept")
              .arg(u.attention_tokens)
              .arg(u.tokens);
        }
        return tr("%1/%2 in attention").arg(u.attention_tokens).arg(u.tokens);
      }
      return QVariant::fromValue<qlonglong>(u.tokens);
    case kLocation:
      return QString::fromUtf8(memory_location_name(u.location));
    case kBytes:
      return format_bytes_short(u.bytes);
    case kVersion:
      return QVariant::fromValue<qlonglong>(u.version);
    case kState:
      if (role == Qt::ToolTipRole) return state_explained(u.state);
      return QString::fromStdString(u.state);
    case kText:
      return QString::fromStdString(u.preview);
    default:
      return {};
  }
}

QVariant MemoryUnitsModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || section < 0 || section >= kColumns) return {};
  if (role == Qt::ToolTipRole && section == kVersion)
    return tr("Version: goes up when the unit changes and its KV is computed anew");
  if (role != Qt::DisplayRole) return {};
  static const char* names[] = {"Unit", "Tokens", "KV location", "Bytes", "Ver.", "State", "Text"};
  return tr(names[section]);
}

MemoryInspector::MemoryInspector(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("memoryInspectorPanel"));
  model_ = new MemoryUnitsModel(this);
  table_ = new QTableView(this);
  table_->setModel(model_);
  table_->verticalHeader()->hide();
  table_->setAlternatingRowColors(true);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  // Numbers and states at their width, the text takes the rest (elided): no sideways scrolling.
  for (int c = 0; c < MemoryUnitsModel::kColumns; ++c) {
    table_->horizontalHeader()->setSectionResizeMode(
        c, c == MemoryUnitsModel::kText ? QHeaderView::Stretch : QHeaderView::ResizeToContents);
  }
  table_->setTextElideMode(Qt::ElideRight);
  table_->setWordWrap(false);
  table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
  totals_ = new QLabel(this);
  totals_->setObjectName(QStringLiteral("memoryTotals"));
  totals_->setWordWrap(true);
  totals_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(table_, 1);
  layout->addWidget(totals_);
  setSnapshot({});
}

QString MemoryInspector::totals_text() const {
  return totals_->text();
}

void MemoryInspector::setSnapshot(const MemorySnapshot& snapshot) {
  model_->set_snapshot(snapshot);
  QStringList parts;
  for (int l = 0; l < kMemoryLocationCount; ++l) {
    const auto loc = static_cast<MemoryLocation>(l);
    if (loc == MemoryLocation::kNone) continue;
    if (loc == MemoryLocation::kEvicted) {
      // Out of attention: no KV is kept for them, so no bytes (their text is).
      parts << tr("%1: %2 tokens, out of attention (no KV kept)")
                   .arg(QString::fromUtf8(memory_location_name(loc)))
                   .arg(snapshot.tokens_by_location[l]);
      continue;
    }
    parts << tr("%1: %2 tokens, %3")
                 .arg(QString::fromUtf8(memory_location_name(loc)))
                 .arg(snapshot.tokens_by_location[l])
                 .arg(format_bytes_short(snapshot.bytes_by_location[l]));
  }
  int64_t text_only = 0;
  for (const auto& u : snapshot.units)
    text_only += u.location == MemoryLocation::kNone ? 1 : 0;
  QString engine = snapshot.engine_device.empty()
                       ? tr("no model loaded")
                       : tr("engine cache on %1: %2 tokens, %3")
                             .arg(QString::fromStdString(snapshot.engine_device))
                             .arg(snapshot.engine_cached_tokens)
                             .arg(format_bytes_short(snapshot.engine_cache_bytes));
  if (snapshot.engine_host_layers > 0) {
    engine += tr(" (%1 of %2 layers in pinned host memory until the next prefill)")
                  .arg(snapshot.engine_host_layers)
                  .arg(snapshot.engine_layers);
  }
  // The store's copy, loaded or not: what a restart brings back without re-reading the history.
  QString stored = snapshot.stored_tokens == 0
                       ? tr("nothing saved in the store")
                       : tr("saved in the store: %1 tokens, %2 KV + %3 token ids")
                             .arg(snapshot.stored_tokens)
                             .arg(format_bytes_short(snapshot.stored_kv_bytes))
                             .arg(format_bytes_short(snapshot.stored_token_id_bytes));
  if (snapshot.stored_episode_caches > 0) {
    stored += tr("<br>episode caches in the store: %1, %2")
                  .arg(snapshot.stored_episode_caches)
                  .arg(format_bytes_short(snapshot.stored_episode_kv_bytes));
  }
  totals_->setText(tr("<b>Totals per location</b><br>%1<br>%2 units, %3 text only<br>%4<br>%5")
                       .arg(parts.join(QStringLiteral("<br>")))
                       .arg(snapshot.units.size())
                       .arg(text_only)
                       .arg(engine, stored));
  Q_EMIT snapshotShown(snapshot);
}

}  // namespace engram::ui
