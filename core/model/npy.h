// NumPy .npy files of float32 (little-endian, C order): `engram-cli logits --out` writes them
// and the tests read the transformers reference logits from them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

namespace engram {

struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Throws std::runtime_error naming the file for anything but a float32 C-order array.
NpyArray read_npy_f32(const std::filesystem::path& path);
void write_npy_f32(const std::filesystem::path& path, const std::vector<int64_t>& shape,
                   const float* data);

}  // namespace engram
