#include "core/kv/kv_page_pool.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "gpu/device_timeline.h"
#include "gpu/exact_pinned.h"

namespace engram {
namespace {

std::string errno_text() {
  return std::strerror(errno);
}

// Reads or writes exactly n bytes at offset (pread/pwrite may do part of it).
void transfer(int fd, char* data, int64_t n, int64_t offset, bool writing,
              const std::filesystem::path& file) {
  while (n > 0) {
    const ssize_t done = writing ? ::pwrite(fd, data, static_cast<size_t>(n), offset)
                                 : ::pread(fd, data, static_cast<size_t>(n), offset);
    if (done < 0 && errno == EINTR) continue;
    if (done <= 0) {
      throw std::runtime_error(std::string(writing ? "writing" : "reading") + " KV page in " +
                               file.string() + ": " +
                               (done == 0 ? std::string("short file") : errno_text()));
    }
    data += done;
    n -= done;
    offset += done;
  }
}

}  // namespace

std::string_view page_tier_name(PageTier tier) {
  switch (tier) {
    case PageTier::kDevice:
      return "device";
    case PageTier::kPinned:
      return "pinned";
    case PageTier::kDisk:
      return "disk";
  }
  return "?";
}

KvPagePool::KvPagePool(KvCacheShape shape, at::ScalarType dtype, at::Device device,
                       KvPagePoolOptions options)
    : shape_(shape), dtype_(dtype), device_(device), options_(std::move(options)) {
  if (options_.page_tokens <= 0 || options_.device_pages < 0 || options_.pinned_pages < 0) {
    throw std::invalid_argument("KvPagePool: page size and capacities must be positive");
  }
  std::vector<int64_t> sizes = page_sizes();
  sizes.insert(sizes.begin(), options_.device_pages);
  tier(PageTier::kDevice).slab = at::zeros(sizes, at::TensorOptions().dtype(dtype).device(device));
  sizes[0] = options_.pinned_pages;
  // Exactly its pages, locked once for the pool's life (not rounded up to a power of two).
  tier(PageTier::kPinned).slab =
      gpu::pinned_memory_available() ? gpu::exact_pinned(sizes, dtype) : at::empty(sizes, dtype);
  if (!options_.spill_dir.empty()) {
    static std::atomic<int64_t> counter{0};
    std::filesystem::create_directories(options_.spill_dir);
    spill_file_ = options_.spill_dir / ("kv-pages-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter++) + ".spill");
    spill_fd_ = ::open(spill_file_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (spill_fd_ < 0) {
      throw std::runtime_error("cannot create the KV spill file " + spill_file_.string() + ": " +
                               errno_text());
    }
  }
}

KvPagePool::~KvPagePool() {
  if (spill_fd_ >= 0) {
    ::close(spill_fd_);
    std::error_code ignored;
    std::filesystem::remove(spill_file_, ignored);
  }
}

std::vector<int64_t> KvPagePool::page_sizes() const {
  return {shape_.layers, 2, shape_.kv_heads, options_.page_tokens, shape_.head_dim};
}

int64_t KvPagePool::page_bytes() const {
  int64_t n = static_cast<int64_t>(c10::elementSize(dtype_));
  for (int64_t s : page_sizes())
    n *= s;
  return n;
}

int64_t KvPagePool::capacity(PageTier t) const {
  if (t == PageTier::kDisk) return spill_fd_ >= 0 ? -1 : 0;
  return tier(t).slab.size(0);
}

int64_t KvPagePool::in_use(PageTier t) const {
  return tier(t).used;
}

PageRef KvPagePool::allocate(PageTier t) {
  Tier& s = tier(t);
  int64_t index;
  if (!s.free.empty()) {
    index = s.free.back();
    s.free.pop_back();
  } else if (t == PageTier::kDisk ? spill_fd_ >= 0 : s.size < s.slab.size(0)) {
    index = s.size++;
  } else {
    throw std::runtime_error("the " + std::string(page_tier_name(t)) + " KV page pool is full (" +
                             std::to_string(capacity(t)) + " pages of " +
                             std::to_string(options_.page_tokens) + " tokens)");
  }
  ++s.used;
  return {t, index};
}

void KvPagePool::check(PageRef page) const {
  const Tier& s = tier(page.tier);
  if (page.index < 0 || page.index >= s.size) {
    throw std::out_of_range("KV page " + std::to_string(page.index) + " is not in the " +
                            std::string(page_tier_name(page.tier)) + " pool");
  }
}

void KvPagePool::release(PageRef page) {
  check(page);
  Tier& s = tier(page.tier);
  s.free.push_back(page.index);
  --s.used;
}

void KvPagePool::write(PageRef page, const at::Tensor& block) {
  check(page);
  if (block.sizes() != at::IntArrayRef(page_sizes()) || block.scalar_type() != dtype_) {
    throw std::invalid_argument("KvPagePool::write: the block must be [layers, 2, kv_heads, " +
                                std::to_string(options_.page_tokens) +
                                ", head_dim] in the pool's dtype");
  }
  if (page.tier != PageTier::kDisk) {
    tier(page.tier).slab.select(0, page.index).copy_(block);
    return;
  }
  const at::Tensor host = block.to(at::kCPU).contiguous();
  transfer(spill_fd_, static_cast<char*>(host.data_ptr()), page_bytes(), page.index * page_bytes(),
           /*writing=*/true, spill_file_);
}

at::Tensor KvPagePool::read(PageRef page) const {
  check(page);
  if (page.tier != PageTier::kDisk) return tier(page.tier).slab.select(0, page.index);
  at::Tensor host = at::empty(page_sizes(), at::TensorOptions().dtype(dtype_));
  transfer(spill_fd_, static_cast<char*>(host.data_ptr()), page_bytes(), page.index * page_bytes(),
           /*writing=*/false, spill_file_);
  return host;
}

at::Tensor KvPagePool::layer_block(PageRef page, int64_t layer) const {
  check(page);
  if (page.tier == PageTier::kDisk) {
    throw std::logic_error("KvPagePool::layer_block: a disk page must be moved to memory first");
  }
  return tier(page.tier).slab.select(0, page.index).select(0, layer);
}

PageRef KvPagePool::move(PageRef page, PageTier to) {
  if (page.tier == to) return page;
  const PageRef target = allocate(to);
  try {
    write(target, read(page));
  } catch (...) {
    release(target);
    throw;
  }
  release(page);
  return target;
}

}  // namespace engram
