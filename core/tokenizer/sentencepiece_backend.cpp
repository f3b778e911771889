#include "core/tokenizer/sentencepiece_backend.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <stdexcept>

namespace engram {
namespace {

using LoadFn = SentencePieceBackend* (*)(const char*, std::string*);

// Where the backend library may be: an explicit override, beside the running program, the
// private library folder relative to it (../lib/<multiarch>/engram: the .deb and the tarball),
// the build tree this was compiled in, then the configured install prefix.
std::vector<std::filesystem::path> candidates() {
  std::vector<std::filesystem::path> out;
  if (const char* env = std::getenv("ENGRAM_SENTENCEPIECE_LIBRARY")) out.emplace_back(env);
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto dir = exe.parent_path();
    out.push_back(dir / "libengram_sentencepiece.so");
#ifdef ENGRAM_SENTENCEPIECE_INSTALL_RELDIR
    out.push_back(dir.parent_path() / ENGRAM_SENTENCEPIECE_INSTALL_RELDIR /
                  "libengram_sentencepiece.so");
#endif
  }
#ifdef ENGRAM_SENTENCEPIECE_BUILD_PATH
  out.emplace_back(ENGRAM_SENTENCEPIECE_BUILD_PATH);
#endif
#ifdef ENGRAM_SENTENCEPIECE_INSTALL_PATH
  out.emplace_back(ENGRAM_SENTENCEPIECE_INSTALL_PATH);
#endif
  return out;
}

LoadFn resolve() {
  static std::mutex mutex;
  static LoadFn fn = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (fn) return fn;
  std::string tried;
  for (const auto& path : candidates()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      tried += std::string(" ") + dlerror() + ";";
      continue;
    }
    fn = reinterpret_cast<LoadFn>(dlsym(handle, "engram_sentencepiece_load"));
    if (fn) return fn;
    tried += " " + path.string() + " lacks engram_sentencepiece_load;";
  }
  throw std::runtime_error(
      "libengram_sentencepiece.so (the SentencePiece backend) was not found or did not load; "
      "set ENGRAM_SENTENCEPIECE_LIBRARY to its path." +
      tried);
}

}  // namespace

std::unique_ptr<SentencePieceBackend> load_sentencepiece(const std::string& model_file,
                                                         std::string* error) {
  LoadFn fn = resolve();
  return std::unique_ptr<SentencePieceBackend>(fn(model_file.c_str(), error));
}

}  // namespace engram
