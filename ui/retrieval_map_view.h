// The retrieval map of one reply (issue 17's panel; core/trace/retrieval_map.h): decode steps
// across, one row per layer. A magenta cell is a retrieval (LouisKV's semantic boundary at that
// layer and token, Quest's every step), its tooltip the rows and units it loaded; the other cells
// of a retrieval layer are shaded by r_t (darker: the query turned further from the previous
// one), the full layers hatched. Beside each row its retrievals a token, below the map how many
// layers retrieved at each token. Where a pixel column holds several steps, a cell's strength is
// the share of them that retrieved. Wheel zooms around the cursor, drag pans.
#pragma once

#include <QString>
#include <memory>
#include <vector>

#include "core/trace/retrieval_map.h"
#include "ui/pan_zoom_view.h"

namespace engram::ui {

// One line for the panel's summary: retrievals a layer and token, rows and units per retrieval,
// the full layers, how often r_t fell below τ.
QString describe_retrieval_map(const RetrievalMap& map);

class RetrievalMapView : public PanZoomView {
  Q_OBJECT

 public:
  explicit RetrievalMapView(QWidget* parent = nullptr);
  void set_map(std::shared_ptr<const RetrievalMap> map);  // null clears
  const RetrievalMap* map() const { return map_.get(); }
  void fit() override;
  double view_start_step() const { return view_start_; }
  double view_end_step() const { return view_end_; }
  void render_to(QPainter& painter, const QSize& size) const override;
  QSize sizeHint() const override;
  // What lies under `pos`: the step and layer, its retrieval (rows, units) or r_t; a row's rate;
  // a column's count; empty off the map.
  QString describe_at(const QPoint& pos) const override;
  // The retrieval at (step, layer), or null.
  const RetrievalMap::Retrieval* retrieval_at(int64_t step, int64_t layer) const;

 protected:
  int plot_left() const override;
  int plot_right() const override;
  double min_span() const override { return 4; }  // steps

 private:
  std::shared_ptr<const RetrievalMap> map_;
  std::vector<int32_t> index_;      // [steps × layers]: the retrieval's index in map_, -1 for none
  std::vector<int64_t> per_layer_;  // each layer's retrievals (the rate column)
};

}  // namespace engram::ui
