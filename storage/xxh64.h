// XXH64, the 64-bit xxHash of Yann Collet (github.com/Cyan4973/xxHash, doc/xxhash_spec.md), for
// the checksums of KV blob files. Our own ~100 lines rather than a dependency: Debian ships only
// the runtime library (no -dev headers in our build image), the algorithm is frozen by its
// specification, and it runs at memory speed, so checking a blob costs little next to reading
// it. tests/test_store_checksum.cpp compares it with published values of the reference library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace engram::storage {

// Streaming form: blobs are checksummed while they are written, without a second pass.
class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0);
  void update(std::span<const std::byte> data);
  std::uint64_t digest() const;

 private:
  std::uint64_t acc_[4];
  std::uint64_t seed_;
  std::uint64_t total_ = 0;
  std::byte buffer_[32];
  std::size_t buffered_ = 0;
};

std::uint64_t xxh64(std::span<const std::byte> data, std::uint64_t seed = 0);

}  // namespace engram::storage
