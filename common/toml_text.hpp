#pragma once
// Parsing TOML text the operator wrote (playbooks, inventories, agent configurations).
#include <string_view>
#include <toml++/toml.h>

namespace rc {

// toml::parse, without toml++ 3.3's undefined behaviour on some non-ASCII characters: its
// is_non_ascii_horizontal_whitespace reaches __builtin_unreachable() for about 3,000 code
// points (U+00A1-U+0499, U+2C8E-U+3087 but U+3000, U+FC26-U+FEFE) wherever it asks "is this
// whitespace?": outside strings, in quoted keys, after a multi-line string's line-ending
// backslash. None of them is whitespace, so the text is parsed with each one swapped for a
// private-use code point (U+E000-U+EAD8: "not whitespace" in toml++'s table too) and every key
// and string of the result, and the error text, swapped back. Text that itself holds a code
// point of that private-use range is refused with a parse_error naming its line and column.
// Throws toml::parse_error like toml::parse.
toml::table parseToml(std::string_view text, std::string_view source);

// Exposed for tests: whether toml++ 3.3's whitespace test is undefined for C, and the swap.
bool tomlWhitespaceHazard(char32_t c);
char32_t tomlHazardStandIn(char32_t c);      // C must be a hazard
char32_t tomlHazardFromStandIn(char32_t p);  // 0 when P is no stand-in

}  // namespace rc
