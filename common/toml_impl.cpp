// The one translation unit that compiles toml++ (everyone else includes it header-only off).
#include <string>

// toml++ 3.3 asserts on some malformed input instead of reporting it: the two bytes "[=" abort
// any parse (found by the playbook harness, tests/fuzz/playbook/crashes/), and with NDEBUG the
// assertion becomes an assumption, i.e. undefined behaviour. Its parser is compiled only here:
// its assertions throw the parse error every caller already handles, in every build type.
#undef NDEBUG
namespace rc::toml_detail {
[[noreturn]] void parserAssertion(const char* expr);
}
#define TOML_ASSERT(expr) \
  ((expr) ? static_cast<void>(0) : ::rc::toml_detail::parserAssertion(#expr))

#define TOML_IMPLEMENTATION
#include <toml++/toml.h>

namespace rc::toml_detail {

void parserAssertion(const char* expr) {
  const std::string desc =
      "malformed TOML the parser cannot read past (check table headers and keys; parser check '" +
      std::string(expr) + "')";
  throw toml::parse_error(desc.c_str(), toml::source_position{1, 1});
}

}  // namespace rc::toml_detail
