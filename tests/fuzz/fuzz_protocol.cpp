// Fuzz harness: the agent's side of the control protocol (framing, JSON bounds, every request
// type) and the controller's reply parsing, on bytes as a peer could send them.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/protocol.hpp"

namespace {

void handle(const rc::proto::json& m) {
  using namespace rc::proto;
  if (auto env = parseRequest(m)) {
    // An accepted request echoes back: the reply must encode and decode to an object again.
    std::string frame = encodeFrame(makeReply(env->id, env->type));
    FrameDecoder d;
    d.feed(frame);
    auto again = d.next();
    if (!again || !*again) std::abort();
  }
  (void)parseReply(m, 1, "status");
  // Agents print what they refuse; printing must not recurse without bound.
  (void)m.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rc::proto;
  std::string_view body(reinterpret_cast<const char*>(data), size);
  if (auto m = parseBody(body)) handle(*m);

  // The same bytes as a stream: a framed body, then the input's own bytes read as further
  // frames (arbitrary length headers, partial frames), fed in two pieces.
  std::string stream;
  const uint32_t n = uint32_t(size);
  stream.push_back(char(n >> 24));
  stream.push_back(char(n >> 16));
  stream.push_back(char(n >> 8));
  stream.push_back(char(n));
  stream.append(body);
  stream.append(body);
  FrameDecoder decoder;
  const size_t cut = size ? data[0] % (stream.size() + 1) : 0;
  decoder.feed(std::string_view(stream).substr(0, cut));
  for (int pass = 0; pass < 2; pass++) {
    while (auto r = decoder.next()) {
      if (!*r) return 0;  // the session would close here
      handle(**r);
    }
    decoder.feed(std::string_view(stream).substr(cut));
  }
  return 0;
}
