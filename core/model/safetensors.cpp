#include "core/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/model/model_error.h"

namespace engram {
namespace {

using nlohmann::json;

// The reference implementation refuses headers past 100 MB; a length beyond that is a corrupt or
// hostile file, and parsing it would cost the memory before we could say so.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::string in_quotes(const std::string& s) {
  return "'" + s + "'";
}

uint64_t read_le_u64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

void append_le_u64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads a whole small text file (index or config); ModelError when it cannot be read.
std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelError(path.string(), std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A tensor's place in the data area while the header is being validated.
struct Span {
  uint64_t begin = 0;
  uint64_t end = 0;
  size_t tensor = 0;  // index into the tensor list
};

uint64_t non_negative_integer(const json& v, const std::string& file, const std::string& what) {
  if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
    throw ModelError(file, what + " must be a non-negative integer, got " + v.dump());
  }
  return v.is_number_unsigned() ? v.get<uint64_t>() : static_cast<uint64_t>(v.get<int64_t>());
}

TensorView parse_tensor_entry(const std::string& name, const json& entry, const std::string& file,
                              uint64_t* begin, uint64_t* end) {
  const std::string who = "tensor " + in_quotes(name);
  if (!entry.is_object()) throw ModelError(file, who + ": header entry is not an object");
  TensorView view;
  view.name = name;
  view.file = file;

  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    throw ModelError(file, who + ": missing or non-string 'dtype'");
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  if (!dtype_from_safetensors_name(dtype_name, &view.dtype)) {
    throw ModelError(file, who + ": unknown dtype " + in_quotes(dtype_name) +
                               " (known: F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL)");
  }

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) {
    throw ModelError(file, who + ": missing or non-array 'shape'");
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& dim : *shape_it) {
    const uint64_t d = non_negative_integer(dim, file, who + ": shape entry");
    if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw ModelError(file, who + ": shape entry " + dim.dump() + " is too large");
    }
    view.shape.push_back(static_cast<int64_t>(d));
    overflow = overflow || __builtin_mul_overflow(numel, d, &numel);
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    throw ModelError(file, who + ": 'data_offsets' must be [begin, end]");
  }
  *begin = non_negative_integer((*offsets_it)[0], file, who + ": data_offsets begin");
  *end = non_negative_integer((*offsets_it)[1], file, who + ": data_offsets end");
  if (*begin > *end) {
    throw ModelError(file, who + ": data_offsets begin " + std::to_string(*begin) +
                               " is after end " + std::to_string(*end));
  }

  uint64_t expected = 0;
  overflow = overflow || __builtin_mul_overflow(numel, dtype_size(view.dtype), &expected);
  const uint64_t span = *end - *begin;
  if (overflow || expected != span) {
    std::ostringstream shape;
    shape << "[";
    for (size_t i = 0; i < view.shape.size(); ++i)
      shape << (i ? ", " : "") << view.shape[i];
    shape << "]";
    throw ModelError(file,
                     who + ": shape " + shape.str() + " of " + dtype_name + " needs " +
                         (overflow ? std::string("more than 2^64") : std::to_string(expected)) +
                         " bytes but data_offsets span " + std::to_string(span) +
                         " (shape/bytes mismatch)");
  }
  view.nbytes = static_cast<size_t>(span);
  return view;
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::unique_ptr<SafetensorsFile> st(new SafetensorsFile());
  st->path_ = path;

  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ModelError(file, std::string("cannot open: ") + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw ModelError(file, "not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size < 8) {
    ::close(fd);
    throw ModelError(
        file, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) {
    throw ModelError(file, std::string("cannot map: ") + std::strerror(map_errno));
  }
  // From here the destructor unmaps on every error path.
  st->mapping_ = mapping;
  st->size_ = static_cast<size_t>(size);
  const auto* bytes = static_cast<const std::byte*>(mapping);

  const uint64_t header_len = read_le_u64(bytes);
  if (header_len > kMaxHeaderBytes) {
    throw ModelError(file, "huge header: length " + std::to_string(header_len) +
                               " bytes exceeds the 100 MB limit");
  }
  if (header_len > size - 8) {
    throw ModelError(file, "header length " + std::to_string(header_len) +
                               " runs past the file end (file is " + std::to_string(size) +
                               " bytes)");
  }

  json header;
  try {
    const char* text = reinterpret_cast<const char*>(bytes + 8);
    header = json::parse(text, text + header_len);
  } catch (const json::exception& e) {
    throw ModelError(file, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw ModelError(file, "header is not a JSON object");

  const std::byte* data = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<Span> spans;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw ModelError(file, "'__metadata__' is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          throw ModelError(file, "'__metadata__' entry " + in_quotes(key) + " is not a string");
        }
        st->metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    Span span;
    TensorView view = parse_tensor_entry(name, entry, file, &span.begin, &span.end);
    span.tensor = st->tensors_.size();
    spans.push_back(span);
    st->tensors_.push_back(std::move(view));
  }

  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t max_end = 0;
  bool contiguous = true;          // laid out back to back from 0, as every writer does
  const Span* furthest = nullptr;  // the non-empty span reaching furthest so far
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& span = spans[i];
    contiguous = contiguous && span.begin == (i == 0 ? 0 : spans[i - 1].end);
    max_end = std::max(max_end, span.end);
    if (span.begin == span.end) continue;  // an empty tensor occupies no bytes
    if (furthest != nullptr && span.begin < furthest->end) {
      throw ModelError(file, "tensor " + in_quotes(st->tensors_[span.tensor].name) +
                                 " data_offsets [" + std::to_string(span.begin) + ", " +
                                 std::to_string(span.end) + "] overlap tensor " +
                                 in_quotes(st->tensors_[furthest->tensor].name) + " [" +
                                 std::to_string(furthest->begin) + ", " +
                                 std::to_string(furthest->end) + "] (overlapping spans)");
    }
    if (furthest == nullptr || span.end > furthest->end) furthest = &span;
  }
  if (max_end > data_size) {
    if (contiguous) {
      const auto& last = st->tensors_[spans.back().tensor];
      throw ModelError(file, "file truncated: the tensors need " + std::to_string(max_end) +
                                 " bytes of data but the file holds " + std::to_string(data_size) +
                                 " (tensor " + in_quotes(last.name) + " ends past the file end)");
    }
    for (const Span& span : spans) {
      if (span.end > data_size) {
        throw ModelError(file, "tensor " + in_quotes(st->tensors_[span.tensor].name) +
                                   " data_offsets [" + std::to_string(span.begin) + ", " +
                                   std::to_string(span.end) + "] out of bounds of the data area (" +
                                   std::to_string(data_size) + " bytes)");
      }
    }
  }

  for (size_t i = 0; i < spans.size(); ++i) {
    TensorView& view = st->tensors_[spans[i].tensor];
    view.data = data + spans[i].begin;
  }
  for (size_t i = 0; i < st->tensors_.size(); ++i)
    st->index_[st->tensors_[i].name] = i;
  return st;
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

WeightFiles WeightFiles::open_folder(const std::filesystem::path& dir) {
  WeightFiles weights;
  weights.dir_ = dir;
  const std::filesystem::path index_path = dir / kIndexName;
  const std::filesystem::path single_path = dir / kSingleName;
  // Which shard each tensor must come from, when an index says so.
  std::map<std::string, std::string> expected_shard;

  if (std::filesystem::exists(index_path)) {
    const std::string index_file = index_path.string();
    json index;
    try {
      index = json::parse(read_text_file(index_path));
    } catch (const json::exception& e) {
      throw ModelError(index_file, std::string("not valid JSON: ") + e.what());
    }
    const auto map_it = index.is_object() ? index.find("weight_map") : index.end();
    if (map_it == index.end() || !map_it->is_object()) {
      throw ModelError(index_file, "missing 'weight_map' object");
    }
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : map_it->items()) {
      if (!shard.is_string()) {
        throw ModelError(
            index_file, "weight_map entry for tensor " + in_quotes(tensor) + " is not a file name");
      }
      const std::string shard_name = shard.get<std::string>();
      const std::filesystem::path rel(shard_name);
      // Shards live beside the index; a path that leaves the folder is not a shard.
      if (rel.empty() || rel.is_absolute() || rel.has_parent_path()) {
        throw ModelError(index_file, "shard " + in_quotes(shard_name) + " for tensor " +
                                         in_quotes(tensor) + " is not a file name in the folder");
      }
      expected_shard[tensor] = shard_name;
      shards.insert(shard_name);
    }
    for (const std::string& shard_name : shards) {
      const std::filesystem::path shard_path = dir / shard_name;
      if (!std::filesystem::exists(shard_path)) {
        throw ModelError(index_file, "shard " + in_quotes(shard_name) +
                                         " named by the index is missing (" + shard_path.string() +
                                         ")");
      }
      weights.files_.push_back(SafetensorsFile::open(shard_path));
    }
  } else if (std::filesystem::exists(single_path)) {
    weights.files_.push_back(SafetensorsFile::open(single_path));
  } else {
    throw ModelError(dir.string(), std::string("no ") + kSingleName + " or " + kIndexName);
  }

  for (const auto& f : weights.files_) {
    for (const TensorView& view : f->tensors()) {
      const auto [it, inserted] = weights.by_name_.emplace(view.name, &view);
      if (!inserted) {
        throw ModelError(view.file, "tensor " + in_quotes(view.name) + " is also in " +
                                        it->second->file + " (duplicate tensor name)");
      }
    }
  }
  for (const auto& [tensor, shard_name] : expected_shard) {
    const std::string shard_file = (dir / shard_name).string();
    const auto it = weights.by_name_.find(tensor);
    if (it == weights.by_name_.end() || it->second->file != shard_file) {
      throw ModelError(shard_file, "tensor " + in_quotes(tensor) + " named by " +
                                       (dir / kIndexName).string() + " is missing from this shard");
    }
  }
  return weights;
}

const TensorView* WeightFiles::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const TensorView& WeightFiles::at(const std::string& name) const {
  const TensorView* view = find(name);
  if (view == nullptr) {
    throw ModelError(dir_.string(), "tensor " + in_quotes(name) + " not found in the weight files");
  }
  return *view;
}

std::vector<std::string> WeightFiles::names() const {
  std::vector<std::string> out;
  out.reserve(by_name_.size());
  for (const auto& [name, view] : by_name_)
    out.push_back(name);
  return out;
}

size_t WeightFiles::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, view] : by_name_)
    total += view->nbytes;
  return total;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  const std::string file = path.string();
  // ordered_json keeps the header in the caller's order, so the data follows the same order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<size_t> sizes;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name == "__metadata__" || header.contains(t.name)) {
      throw ModelError(file,
                       "cannot write tensor " + in_quotes(t.name) + ": duplicate or reserved name");
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        throw ModelError(file, "cannot write tensor " + in_quotes(t.name) + ": negative shape");
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t nbytes = numel * dtype_size(t.dtype);
    if (nbytes > 0 && t.data == nullptr) {
      throw ModelError(file, "cannot write tensor " + in_quotes(t.name) + ": no data");
    }
    header[t.name] = {{"dtype", dtype_safetensors_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(static_cast<size_t>(nbytes));
    offset += nbytes;
  }

  std::string text = header.dump();
  // Like the reference writer: pad with spaces so the data area starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix;
  append_le_u64(&prefix, text.size());

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw ModelError(file, std::string("cannot create: ") + std::strerror(errno));
  out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (size_t i = 0; i < tensors.size(); ++i) {
    out.write(static_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(sizes[i]));
  }
  out.close();
  if (!out) throw ModelError(file, "write failed");
}

}  // namespace engram
