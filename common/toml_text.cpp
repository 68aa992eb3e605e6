#include "common/toml_text.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace rc {
namespace {

// toml++ 3.3's is_non_ascii_horizontal_whitespace splits [U+00A0, U+FEFF] into blocks of
// 0x3FA code points; a block whose bit is clear in this mask falls through to a switch that
// handles blocks 5 and 7 only: every other code point of blocks 0, 11 and 63 but the three it
// tests for by value is unreachable there.
constexpr uint64_t kFalseBlocks = 0x7FFFFFFFFFFFF75Eull;
constexpr char32_t kBlockBase = 0xA0, kBlockSize = 0x3FA;
// Stand-ins: block 0 at U+E000, block 11 at U+E400, block 63 at U+E800.
constexpr char32_t kStandIn = 0xE000, kStandInEnd = 0xE800 + (0xFEFF - (kBlockBase + 63 * kBlockSize));

struct Decoded {
  char32_t c = 0;
  size_t len = 0;  // 0: not a well-formed sequence
};

Decoded decode(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c0 = b(i);
  if (c0 < 0x80) return {c0, 1};
  size_t len = c0 >= 0xF0 && c0 < 0xF5 ? 4 : c0 >= 0xE0 ? 3 : c0 >= 0xC2 && c0 < 0xE0 ? 2 : 0;
  if (len == 0 || i + len > s.size()) return {};
  char32_t c = c0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (size_t k = 1; k < len; k++) {
    if ((b(i + k) & 0xC0) != 0x80) return {};
    c = (c << 6) | (b(i + k) & 0x3F);
  }
  if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) || (c >= 0xD800 && c <= 0xDFFF))
    return {};
  return {c, len};
}

void encode(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

// Swaps every code point for which FROM returns non-zero; malformed bytes are kept as they are
// (toml++ reports them).
template <typename F>
std::string swapped(std::string_view s, F from) {
  std::string out;
  out.reserve(s.size() + s.size() / 8);
  for (size_t i = 0; i < s.size();) {
    Decoded d = decode(s, i);
    if (d.len == 0) {
      out += s[i++];
      continue;
    }
    if (char32_t r = from(d.c)) encode(out, r);
    else out.append(s.substr(i, d.len));
    i += d.len;
  }
  return out;
}

std::string restore(std::string_view s) {
  return swapped(s, [](char32_t c) { return tomlHazardFromStandIn(c); });
}

bool hasStandIn(std::string_view s) {
  // U+E000-U+EAD8 is EE 80 80 .. EE AB 98 in UTF-8.
  return s.find('\xEE') != std::string_view::npos;
}

void restoreTree(toml::node& n) {
  if (auto* str = n.as_string()) {
    if (hasStandIn(str->get())) str->get() = restore(str->get());
  } else if (auto* arr = n.as_array()) {
    for (auto& e : *arr) restoreTree(e);
  } else if (auto* tbl = n.as_table()) {
    std::vector<std::string> renamed;
    for (auto&& [k, v] : *tbl) {
      restoreTree(v);
      if (hasStandIn(k.str())) renamed.emplace_back(k.str());
    }
    for (const auto& old : renamed) {
      toml::node* v = tbl->get(old);
      std::string now = restore(old);
      if (now == old) continue;
      tbl->insert_or_assign(now, std::move(*v));
      tbl->erase(old);
    }
  }
}

}  // namespace

bool tomlWhitespaceHazard(char32_t c) {
  if (c <= kBlockBase || c > 0xFEFF || c == 0x3000 || c == 0xFEFF) return false;
  const uint64_t block = (c - kBlockBase) / kBlockSize;
  return ((1ull << block) & kFalseBlocks) == 0 && block != 5 && block != 7;
}

char32_t tomlHazardStandIn(char32_t c) {
  const char32_t block = (c - kBlockBase) / kBlockSize;
  const char32_t at = c - (kBlockBase + block * kBlockSize);
  return (block == 0 ? 0xE000 : block == 11 ? 0xE400 : 0xE800) + at;
}

char32_t tomlHazardFromStandIn(char32_t p) {
  if (p < kStandIn || p >= kStandInEnd) return 0;
  const char32_t off = p & 0x3FF, group = (p - kStandIn) >> 10;
  const char32_t block = group == 0 ? 0 : group == 1 ? 11 : 63;
  if (off >= kBlockSize) return 0;
  char32_t c = kBlockBase + block * kBlockSize + off;
  return tomlWhitespaceHazard(c) ? c : 0;
}

toml::table parseToml(std::string_view text, std::string_view source) {
  // Refuse the stand-ins themselves, where they stand (line and column in code points).
  uint32_t line = 1, col = 1;
  for (size_t i = 0; i < text.size();) {
    Decoded d = decode(text, i);
    size_t len = d.len ? d.len : 1;
    if (d.len && d.c >= kStandIn && d.c < kStandInEnd) {
      char code[16];
      std::snprintf(code, sizeof code, "U+%04X", unsigned(d.c));
      throw toml::parse_error(("unsupported character " + std::string(code) +
                               " (private use): remove it or write it as an escape in a string")
                                  .c_str(),
                              toml::source_position{line, col}, std::make_shared<const std::string>(source));
    }
    if (text[i] == '\n') {
      line++;
      col = 1;
    } else {
      col++;
    }
    i += len;
  }
  std::string safe = swapped(text, [](char32_t c) { return tomlWhitespaceHazard(c) ? tomlHazardStandIn(c) : 0; });
  toml::table root;
  try {
    root = toml::parse(safe, source);
  } catch (const toml::parse_error& e) {
    std::string desc(e.description());
    if (!hasStandIn(desc)) throw;
    throw toml::parse_error(restore(desc).c_str(), e.source());
  }
  restoreTree(root);
  return root;
}

}  // namespace rc
