// pcapng (the IETF draft "PCAP Next Generation Dump File Format"), the subset the lab switch
// writes and the go-back-N oracle reads: one section (little-endian), one Ethernet interface
// with nanosecond timestamps, and Enhanced Packet Blocks with a direction flag and an optional
// comment. Wireshark and tshark read these files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "common/result.hpp"

namespace rc::pcapng {

// epb_flags direction bits, as the switch port sees a frame: inbound = from the port's host
// into the switch, outbound = from the switch to the host.
enum class Direction : uint32_t { unknown = 0, inbound = 1, outbound = 2 };

// Writes a capture with a size bound: frames that would take it past the limit are counted,
// not written. Not thread-safe; one writer per file.
class Writer {
 public:
  Writer() = default;
  ~Writer() { close(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Creates PATH (mode 0644, truncating) with the section and interface headers.
  Result<void> open(const std::string& path, const std::string& interfaceName, uint32_t snaplen,
                    uint64_t limitBytes, const std::string& application);
  // Appends one frame at wall time WALLNS (ns since the epoch): its first snaplen bytes,
  // and ORIGINAL as its length on the wire. A non-empty comment is written as opt_comment.
  void write(int64_t wallNs, const uint8_t* data, size_t len, Direction dir, const std::string& comment = {});
  void flush();
  void close();
  bool isOpen() const { return f_ != nullptr; }
  uint64_t frames() const { return frames_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t skipped() const { return skipped_; }  // frames past the size limit

 private:
  std::FILE* f_ = nullptr;
  uint32_t snaplen_ = 0;
  uint64_t limit_ = 0, bytes_ = 0, frames_ = 0, skipped_ = 0;
};

struct Record {
  int64_t timeNs = 0;  // since the epoch
  std::vector<uint8_t> data;
  uint32_t originalLength = 0;
  Direction direction = Direction::unknown;
  std::string comment;
  uint32_t interfaceId = 0;
};

// Reads every packet of a little-endian pcapng file (Enhanced and Simple Packet Blocks;
// if_tsresol honoured). Errors name the file and the byte offset of the bad block.
Result<std::vector<Record>> read(const std::string& path);
// The same from a capture already in memory (read once, e.g. with a size cap); NAME is what
// errors call it.
Result<std::vector<Record>> parse(std::span<const uint8_t> buf, const std::string& name);

}  // namespace rc::pcapng
