#include "storage/xxh64.h"

#include <xxhash.h>

#include <new>

namespace engram::storage {

void Xxh64::FreeState::operator()(XXH64_state_s* state) const {
  XXH64_freeState(state);
}

Xxh64::Xxh64(std::uint64_t seed) : state_(XXH64_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH64_reset(state_.get(), seed);  // cannot fail on a state from XXH64_createState
}

Xxh64::~Xxh64() = default;
Xxh64::Xxh64(Xxh64&&) noexcept = default;
Xxh64& Xxh64::operator=(Xxh64&&) noexcept = default;

void Xxh64::update(std::span<const std::byte> data) {
  // Fails only for a null pointer with a non-zero length, which a span cannot hold.
  XXH64_update(state_.get(), data.data(), data.size());
}

std::uint64_t Xxh64::digest() const {
  return XXH64_digest(state_.get());
}

std::uint64_t xxh64(std::span<const std::byte> data, std::uint64_t seed) {
  return XXH64(data.data(), data.size(), seed);
}

}  // namespace engram::storage
