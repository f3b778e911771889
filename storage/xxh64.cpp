#include "storage/xxh64.h"

#include <bit>
#include <cstring>

namespace engram::storage {

namespace {

constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ULL;
constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4FULL;
constexpr std::uint64_t kP3 = 0x165667B19E3779F9ULL;
constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ULL;
constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ULL;

// The specification reads lanes little-endian; memcpy keeps unaligned reads defined.
std::uint64_t read64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

std::uint32_t read32(const std::byte* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap32(v);
  return v;
}

std::uint64_t round(std::uint64_t acc, std::uint64_t lane) {
  acc += lane * kP2;
  acc = std::rotl(acc, 31);
  return acc * kP1;
}

std::uint64_t merge(std::uint64_t acc, std::uint64_t lane_acc) {
  acc ^= round(0, lane_acc);
  return acc * kP1 + kP4;
}

}  // namespace

Xxh64::Xxh64(std::uint64_t seed)
    : acc_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1}, seed_(seed) {}

void Xxh64::update(std::span<const std::byte> data) {
  const std::byte* p = data.data();
  std::size_t n = data.size();
  total_ += n;
  if (buffered_ > 0) {
    const std::size_t take = std::min(n, sizeof buffer_ - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    n -= take;
    if (buffered_ < sizeof buffer_) return;
    for (int i = 0; i < 4; ++i)
      acc_[i] = round(acc_[i], read64(buffer_ + 8 * i));
    buffered_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) {
    for (int i = 0; i < 4; ++i)
      acc_[i] = round(acc_[i], read64(p + 8 * i));
  }
  std::memcpy(buffer_, p, n);
  buffered_ = n;
}

std::uint64_t Xxh64::digest() const {
  std::uint64_t h;
  if (total_ >= 32) {
    h = std::rotl(acc_[0], 1) + std::rotl(acc_[1], 7) + std::rotl(acc_[2], 12) +
        std::rotl(acc_[3], 18);
    for (int i = 0; i < 4; ++i)
      h = merge(h, acc_[i]);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const std::byte* p = buffer_;
  std::size_t n = buffered_;
  for (; n >= 8; p += 8, n -= 8) {
    h ^= round(0, read64(p));
    h = std::rotl(h, 27) * kP1 + kP4;
  }
  if (n >= 4) {
    h ^= static_cast<std::uint64_t>(read32(p)) * kP1;
    h = std::rotl(h, 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) {
    h ^= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(*p)) * kP5;
    h = std::rotl(h, 11) * kP1;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::uint64_t xxh64(std::span<const std::byte> data, std::uint64_t seed) {
  Xxh64 state(seed);
  state.update(data);
  return state.digest();
}

}  // namespace engram::storage
