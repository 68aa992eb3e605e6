// Replays a fuzz harness's corpus and crash reproducers (tests/fuzz/<harness>/) in a plain
// build: every file goes through LLVMFuzzerTestOneInput, as libFuzzer would feed it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [CRASH_DIR...]\n", argv[0]);
    return 2;
  }
  size_t total = 0;
  for (int a = 1; a < argc; a++) {
    const fs::path dir = argv[a];
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      std::fprintf(stderr, "replay: '%s' is not a directory\n", dir.c_str());
      return 1;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename().string().front() != '.')
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
    // The corpus (the first directory) must hold inputs; crash directories may be empty.
    if (a == 1 && files.empty()) {
      std::fprintf(stderr, "replay: corpus '%s' is empty\n", dir.c_str());
      return 1;
    }
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "replay: cannot read '%s'\n", f.c_str());
        return 1;
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      total++;
    }
    std::printf("replay: %zu inputs from %s\n", files.size(), dir.c_str());
  }
  std::printf("replay: %zu inputs, no crash\n", total);
  return 0;
}
