// XXH64, the 64-bit xxHash of Yann Collet (github.com/Cyan4973/xxHash, doc/xxhash_spec.md), for
// the checksums of KV blob files, computed by libxxhash (Debian libxxhash-dev): the reference
// implementation, vectorised and maintained upstream, instead of our own copy of the algorithm.
// The algorithm is frozen by its specification, so checksums stored before the switch still
// match; tests/test_store_checksum.cpp compares with published values of the reference library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

struct XXH64_state_s;

namespace engram::storage {

// Streaming form: blobs are checksummed while they are written, without a second pass.
class Xxh64 {
 public:
  explicit Xxh64(std::uint64_t seed = 0);
  ~Xxh64();
  Xxh64(Xxh64&&) noexcept;
  Xxh64& operator=(Xxh64&&) noexcept;
  void update(std::span<const std::byte> data);
  std::uint64_t digest() const;

 private:
  struct FreeState {
    void operator()(XXH64_state_s* state) const;
  };
  std::unique_ptr<XXH64_state_s, FreeState> state_;
};

std::uint64_t xxh64(std::span<const std::byte> data, std::uint64_t seed = 0);

}  // namespace engram::storage
