// The field reader and writer behind switch_protocol.cpp and switch_protocol_replies.cpp: each
// message's parse is a list of its fields, and the first bad one is the error, named by its path.
#pragma once

#include <limits>
#include <string>
#include <type_traits>

#include "labswitch/switch_protocol.hpp"

namespace rc::swproto::detail {

inline const char* typeName(const std::string*) { return "a string"; }
inline const char* typeName(const bool*) { return "true or false"; }
inline const char* typeName(const int*) { return "an integer"; }
inline const char* typeName(const int64_t*) { return "an integer"; }
inline const char* typeName(const uint64_t*) { return "an unsigned integer"; }
inline const char* typeName(const double*) { return "a number"; }
inline const char* typeName(const json*) { return "a JSON value"; }

inline bool read(const json& v, std::string& out) {
  if (!v.is_string()) return false;
  out = v.get<std::string>();
  return true;
}
inline bool read(const json& v, bool& out) {
  if (!v.is_boolean()) return false;
  out = v.get<bool>();
  return true;
}
inline bool read(const json& v, int64_t& out) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) return false;
  if (!v.is_number_integer()) return false;
  out = v.get<int64_t>();
  return true;
}
inline bool read(const json& v, int& out) {
  int64_t wide = 0;
  if (!read(v, wide) || wide < std::numeric_limits<int>::min() || wide > std::numeric_limits<int>::max()) return false;
  out = int(wide);
  return true;
}
// A non-negative integer: built in C++ from an int it is a signed JSON number, read from text
// an unsigned one.
inline bool read(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (!v.is_number_integer() || v.get<int64_t>() < 0) return false;
  out = uint64_t(v.get<int64_t>());
  return true;
}
inline bool read(const json& v, double& out) {
  if (!v.is_number()) return false;
  out = v.get<double>();
  return true;
}
inline bool read(const json& v, json& out) {
  out = v;
  return true;
}

// 'PATHKEY' in quotes. Built by appending: at -O3, GCC 12 raises a false -Werror=restrict on
// "'" + std::string (docs/architecture.md, "GCC 12 hazards").
inline std::string inQuotes(const std::string& path, const char* key = "") {
  std::string s(1, '\'');
  s += path;
  s += key;
  s += '\'';
  return s;
}

// Reads the fields of one object. WHERE names the message ("set_ecn", "counters reply"), PATH
// the object inside it ("ports[1].queues[3]."). The first error wins; later reads do nothing.
class Reader {
 public:
  Reader(const json& object, std::string where, std::string path = "")
      : j_(object), where_(std::move(where)), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_.empty() ? "the message is not a JSON object" : inQuotes(trimmed()) + " must be an object");
  }

  template <typename T>
  void field(const char* key, T& out) {
    if (error_) return;
    auto it = j_.find(key);
    if (it == j_.end()) return fail(inQuotes(path_, key) + " is missing");
    if (!read(*it, out)) fail(inQuotes(path_, key) + " must be " + typeName(&out) + " (got " + it->dump() + ")");
  }
  // Absent or null: none.
  template <typename T>
  void field(const char* key, std::optional<T>& out) {
    if (error_) return;
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return out.reset();
    T v{};
    if (!read(*it, v)) return fail(inQuotes(path_, key) + " must be " + typeName(&v) + " (got " + it->dump() + ")");
    out = std::move(v);
  }
  // An object field, read by EACH(Reader&, T&).
  template <typename T, typename Each>
  void object(const char* key, T& out, Each each) {
    if (error_) return;
    auto it = j_.find(key);
    if (it == j_.end()) return fail(inQuotes(path_, key) + " is missing");
    Reader r(*it, where_, path_ + key + ".");
    each(r, out);
    if (r.error_) error_ = r.error_;
  }
  // An array field, each element read by EACH(Reader&, T&) (or, for plain values, read()).
  template <typename T, typename Each>
  void list(const char* key, std::vector<T>& out, Each each) {
    if (error_) return;
    auto it = j_.find(key);
    if (it == j_.end()) return fail(inQuotes(path_, key) + " is missing");
    if (!it->is_array()) return fail(inQuotes(path_, key) + " must be an array");
    out.clear();
    for (size_t i = 0; i < it->size() && !error_; i++) {
      std::string at = path_ + key + "[" + std::to_string(i) + "]";
      T v{};
      if constexpr (std::is_invocable_v<Each, Reader&, T&>) {
        Reader r((*it)[i], where_, at + ".");
        each(r, v);
        if (r.error_) error_ = r.error_;
      } else if (!read((*it)[i], v)) {
        fail(inQuotes(at) + " must be " + typeName(&v));
      }
      out.push_back(std::move(v));
    }
  }
  template <typename T>
  void list(const char* key, std::vector<T>& out) {
    list(key, out, 0);
  }

  bool has(const char* key) const { return j_.is_object() && j_.contains(key); }
  const std::optional<Error>& error() const { return error_; }

  template <typename T>
  Result<T> finish(T value) const {
    if (error_) return *error_;
    return value;
  }

  // Records WHAT (prefixed by the message's name) unless an error came first.
  void fail(const std::string& what) {
    if (!error_) error_ = makeError(where_ + ": " + what);
  }

 private:
  std::string trimmed() const { return path_.empty() ? path_ : path_.substr(0, path_.size() - 1); }

  const json& j_;
  std::string where_, path_;
  std::optional<Error> error_;
};

// A request's reader: an object whose "cmd", if there, is CMD.
Reader requestReader(const json& m, std::string_view cmd);
// A reply's reader: an object with "ok": true; an error reply's reason becomes the error.
Reader replyReader(const json& m, std::string_view what);
json request(std::string_view cmd);
json okReply();

template <typename T>
void put(json& j, const char* key, const std::optional<T>& v) {
  if (v) j[key] = *v;
}

}  // namespace rc::swproto::detail
