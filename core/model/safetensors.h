// Reading Hugging Face safetensors checkpoints: one file, or shards named by
// model.safetensors.index.json. Files are memory-mapped and validated in full before any byte is
// used: header length within the file, header JSON well formed and of sane size, known dtypes,
// shape × dtype size equal to each span, spans inside the data area and not overlapping.
// Every failure throws ModelError naming the file and the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/dtype.h"

namespace engram {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // inside the mapping; valid while the file is open
  size_t nbytes = 0;
  std::string file;  // the file it came from, for error messages

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the file. Throws ModelError.
  static std::unique_ptr<SafetensorsFile> open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }
  size_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  std::filesystem::path path_;
  void* mapping_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All weight files of a model folder: DIR/model.safetensors, or the shards listed in
// DIR/model.safetensors.index.json (a shard that is missing, or a tensor the index names that its
// shard lacks, is an error naming both).
class WeightFiles {
 public:
  static WeightFiles open_folder(const std::filesystem::path& dir);

  const TensorView* find(const std::string& name) const;
  // Throws ModelError naming the tensor and the folder when absent.
  const TensorView& at(const std::string& name) const;
  std::vector<std::string> names() const;
  size_t total_bytes() const;  // sum of tensor spans, for load progress

 private:
  std::filesystem::path dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> by_name_;
};

// Writes a safetensors file (used by tests to craft inputs and by tools). Data is copied.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
};
void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace engram
