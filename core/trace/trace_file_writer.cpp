#include "core/trace/trace_file_writer.h"

#include <stdexcept>

namespace engram {

TraceFileWriter::TraceFileWriter(const std::filesystem::path& path)
    : out_(path, std::ios::out | std::ios::trunc) {
  if (!out_) throw std::runtime_error("cannot open trace file " + path.string());
}

void TraceFileWriter::on_layer_interval(const LayerInterval& interval) {
  out_ << to_json_line(interval) << '\n';
  out_.flush();
}

void TraceFileWriter::on_retrieval_map(const RetrievalMap& map) {
  out_ << to_json_line(map) << '\n';
  out_.flush();
}

}  // namespace engram
