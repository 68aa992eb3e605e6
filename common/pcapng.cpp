// pcapng writer and reader (see pcapng.hpp).
#include "common/pcapng.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

namespace rc::pcapng {
namespace {

constexpr uint32_t kShb = 0x0A0D0D0A, kIdb = 1, kSpb = 3, kEpb = 6;
constexpr uint32_t kByteOrder = 0x1A2B3C4D;
constexpr uint16_t kOptEnd = 0, kOptComment = 1, kIfName = 2, kIfTsresol = 9, kEpbFlags = 2, kShbUserAppl = 4;
constexpr uint16_t kLinktypeEthernet = 1;

size_t pad4(size_t n) { return (n + 3) & ~size_t(3); }

void put16(std::string& b, uint16_t v) { b.append(reinterpret_cast<const char*>(&v), 2); }
void put32(std::string& b, uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); }
void option(std::string& b, uint16_t code, const void* data, size_t len) {
  put16(b, code);
  put16(b, uint16_t(len));
  b.append(static_cast<const char*>(data), len);
  b.append(pad4(len) - len, '\0');
}
// Wraps BODY as a block of TYPE (type, total length, body, total length).
std::string block(uint32_t type, const std::string& body) {
  std::string b;
  uint32_t total = uint32_t(12 + body.size());
  put32(b, type);
  put32(b, total);
  b += body;
  put32(b, total);
  return b;
}

uint16_t get16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
uint32_t get32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

}  // namespace

Result<void> Writer::open(const std::string& path, const std::string& interfaceName, uint32_t snaplen,
                          uint64_t limitBytes, const std::string& application) {
  close();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return makeError("cannot create capture '" + path + "': " + std::strerror(errno), errno);
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    ::close(fd);
    return makeError("cannot open capture '" + path + "': " + std::strerror(errno), errno);
  }
  snaplen_ = snaplen;
  limit_ = limitBytes;
  bytes_ = frames_ = skipped_ = 0;
  std::string shb;
  put32(shb, kByteOrder);
  put16(shb, 1);
  put16(shb, 0);
  uint64_t unknownLength = ~uint64_t(0);
  shb.append(reinterpret_cast<const char*>(&unknownLength), 8);
  option(shb, kShbUserAppl, application.data(), application.size());
  option(shb, kOptEnd, nullptr, 0);
  std::string idb;
  put16(idb, kLinktypeEthernet);
  put16(idb, 0);
  put32(idb, snaplen);
  option(idb, kIfName, interfaceName.data(), interfaceName.size());
  uint8_t nanoseconds = 9;
  option(idb, kIfTsresol, &nanoseconds, 1);
  option(idb, kOptEnd, nullptr, 0);
  std::string head = block(kShb, shb) + block(kIdb, idb);
  std::fwrite(head.data(), 1, head.size(), f_);
  bytes_ = head.size();
  return {};
}

void Writer::write(int64_t wallNs, const uint8_t* data, size_t len, Direction dir, const std::string& comment) {
  if (!f_) return;
  size_t cap = std::min<size_t>(len, snaplen_);
  std::string body;
  body.reserve(20 + pad4(cap) + 32 + comment.size());
  put32(body, 0);
  uint64_t ts = uint64_t(wallNs);
  put32(body, uint32_t(ts >> 32));
  put32(body, uint32_t(ts));
  put32(body, uint32_t(cap));
  put32(body, uint32_t(len));
  body.append(reinterpret_cast<const char*>(data), cap);
  body.append(pad4(cap) - cap, '\0');
  uint32_t flags = uint32_t(dir);
  option(body, kEpbFlags, &flags, 4);
  if (!comment.empty()) option(body, kOptComment, comment.data(), std::min<size_t>(comment.size(), 1000));
  option(body, kOptEnd, nullptr, 0);
  if (bytes_ + body.size() + 12 > limit_) {
    skipped_++;
    return;
  }
  std::string b = block(kEpb, body);
  std::fwrite(b.data(), 1, b.size(), f_);
  bytes_ += b.size();
  frames_++;
}

void Writer::flush() {
  if (f_) std::fflush(f_);
}

void Writer::close() {
  if (f_) {
    std::fclose(f_);
    f_ = nullptr;
  }
}

Result<std::vector<Record>> read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError("cannot open capture '" + path + "': " + std::strerror(errno), errno);
  std::vector<uint8_t> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse(buf, path);
}

Result<std::vector<Record>> parse(std::span<const uint8_t> buf, const std::string& path) {
  std::vector<Record> out;
  std::vector<int> tsresol;  // per interface: decimal exponent
  size_t off = 0;
  auto bad = [&](const std::string& why) {
    return makeError("capture '" + path + "' at byte " + std::to_string(off) + ": " + why);
  };
  bool section = false;
  while (off + 12 <= buf.size()) {
    uint32_t type = get32(&buf[off]);
    uint32_t total = get32(&buf[off + 4]);
    if (type == kShb) {
      if (get32(&buf[off + 8]) != kByteOrder) return bad("a big-endian section (only little-endian files are read)");
      section = true;
      tsresol.clear();
    }
    if (!section) return bad("not a pcapng file (no section header block first)");
    if (total < 12 || total % 4 || off + total > buf.size()) return bad("a block of length " + std::to_string(total));
    const uint8_t* body = &buf[off + 8];
    size_t bodyLen = total - 12;
    // Options after FIXED bytes of the body.
    auto options = [&](size_t fixed, auto&& each) {
      size_t o = fixed;
      while (o + 4 <= bodyLen) {
        uint16_t code = get16(body + o), len = get16(body + o + 2);
        if (code == kOptEnd) break;
        if (o + 4 + len > bodyLen) break;
        each(code, body + o + 4, len);
        o += 4 + pad4(len);
      }
    };
    if (type == kIdb) {
      if (bodyLen < 8) return bad("a short interface block");
      int res = 6;
      options(8, [&](uint16_t code, const uint8_t* v, uint16_t len) {
        if (code == kIfTsresol && len >= 1) res = (v[0] & 0x80) ? -1 : v[0];
      });
      if (res < 0) return bad("a power-of-two timestamp resolution (not supported)");
      // 10^-res s a tick: finer than 10^-18 cannot be scaled to ns in 64 bits (the divisor
      // overflows to 0 from 10^-28 on); no capture tool writes one.
      if (res > 18) return bad("a timestamp resolution of 10^-" + std::to_string(res) + " s (at most 10^-18 is read)");
      tsresol.push_back(res);
    } else if (type == kEpb) {
      if (bodyLen < 20) return bad("a short packet block");
      Record r;
      r.interfaceId = get32(body);
      if (r.interfaceId >= tsresol.size()) return bad("a packet of interface " + std::to_string(r.interfaceId) + " that was not described");
      uint64_t ts = (uint64_t(get32(body + 4)) << 32) | get32(body + 8);
      uint32_t cap = get32(body + 12);
      r.originalLength = get32(body + 16);
      if (20 + pad4(cap) > bodyLen) return bad("a packet longer than its block");
      r.data.assign(body + 20, body + 20 + cap);
      int res = tsresol[r.interfaceId];
      int64_t scale = 1;
      for (int i = res; i < 9; i++) scale *= 10;
      int64_t div = 1;
      for (int i = 9; i < res; i++) div *= 10;
      r.timeNs = int64_t(ts) * scale / div;
      options(20 + pad4(cap), [&](uint16_t code, const uint8_t* v, uint16_t len) {
        if (code == kEpbFlags && len == 4) r.direction = Direction(get32(v) & 3);
        if (code == kOptComment) r.comment.assign(reinterpret_cast<const char*>(v), len);
      });
      out.push_back(std::move(r));
    } else if (type == kSpb) {
      if (bodyLen < 4) return bad("a short simple packet block");
      Record r;
      r.originalLength = get32(body);
      size_t cap = std::min<size_t>(r.originalLength, bodyLen - 4);
      r.data.assign(body + 4, body + 4 + cap);
      out.push_back(std::move(r));
    }
    off += total;
  }
  if (off != buf.size()) return bad("a truncated block at the end of the file");
  if (!section) return makeError("capture '" + path + "' is empty or not pcapng");
  return out;
}

}  // namespace rc::pcapng
