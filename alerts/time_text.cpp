// RFC 3339 timestamps and Prometheus durations to nanoseconds, by hand: strptime and timegm
// depend on the locale and TZ, and none of them reads fractional seconds or offsets.
#include "alerts/time_text.hpp"

#include <array>
#include <limits>
#include <string>

namespace rc::alerts {
namespace {


bool digitsAt(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  int v = 0;
  for (size_t i = pos; i < pos + n; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  out = v;
  return true;
}

// Days from 1970-01-01 to Y-M-D in the proleptic Gregorian calendar (Howard Hinnant's
// days_from_civil), exact for every year we accept.
int64_t daysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool leapYear(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int daysInMonth(int y, int m) {
  static constexpr std::array<int, 12> kDays{31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && leapYear(y) ? 29 : kDays[size_t(m - 1)];
}

Error badTime(std::string_view text, const std::string& why) {
  return makeError("\"" + std::string(text.substr(0, 64)) + "\" is not an RFC 3339 time (" + why +
                   "; expected e.g. 2026-11-26T14:30:01.5Z or 2026-11-26T16:30:01+02:00)");
}

}  // namespace

bool isGoZeroTime(std::string_view text) { return text.substr(0, 19) == "0001-01-01T00:00:00"; }

Result<int64_t> parseRfc3339(std::string_view text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!digitsAt(text, 0, 4, year) || text.size() < 5 || text[4] != '-' ||
      !digitsAt(text, 5, 2, month) || text.size() < 8 || text[7] != '-' ||
      !digitsAt(text, 8, 2, day))
    return badTime(text, "the date is not YYYY-MM-DD");
  if (text.size() < 11 || (text[10] != 'T' && text[10] != 't' && text[10] != ' '))
    return badTime(text, "no 'T' between date and time");
  if (!digitsAt(text, 11, 2, hour) || text.size() < 14 || text[13] != ':' ||
      !digitsAt(text, 14, 2, minute) || text.size() < 17 || text[16] != ':' ||
      !digitsAt(text, 17, 2, second))
    return badTime(text, "the time is not HH:MM:SS");
  if (month < 1 || month > 12) return badTime(text, "month " + std::to_string(month));
  if (day < 1 || day > daysInMonth(year, month)) return badTime(text, "day " + std::to_string(day));
  if (hour > 23 || minute > 59 || second > 60) return badTime(text, "time out of range");
  size_t pos = 19;
  int64_t frac = 0;
  if (pos < text.size() && text[pos] == '.') {
    pos++;
    size_t digits = 0;
    for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; pos++, digits++)
      if (digits < 9) frac = frac * 10 + (text[pos] - '0');
    if (digits == 0) return badTime(text, "no digits after '.'");
    for (size_t d = digits; d < 9; d++) frac *= 10;
  }
  int64_t offsetSeconds = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    pos++;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const int sign = text[pos] == '+' ? 1 : -1;
    int oh = 0, om = 0;
    if (!digitsAt(text, pos + 1, 2, oh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !digitsAt(text, pos + 4, 2, om) || oh > 23 || om > 59)
      return badTime(text, "the offset is not +HH:MM or -HH:MM");
    offsetSeconds = sign * (oh * 3600 + om * 60);
    pos += 6;
  } else {
    return badTime(text, "no 'Z' or numeric offset");
  }
  if (pos != text.size()) return badTime(text, "text after the offset");
  // int64 nanoseconds reach from 1677-09-21 to 2262-04-11; whole years inside that.
  if (year < 1678 || year > 2261) return badTime(text, "year outside 1678..2261");
  const int64_t seconds =
      daysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offsetSeconds;
  return seconds * kNsPerSecond + frac;
}

Result<int64_t> parsePromDuration(std::string_view text) {
  auto bad = [&](const std::string& why) {
    return makeError("\"" + std::string(text.substr(0, 64)) + "\" is not a Prometheus duration (" +
                     why + "; expected e.g. 15s, 250ms, 1m30s)");
  };
  if (text == "0") return int64_t{0};
  if (text.empty()) return bad("empty");
  struct Unit {
    std::string_view name;
    int64_t ns;
  };
  // Longest names first where one is a prefix of another ("ms" before "m").
  static constexpr std::array<Unit, 7> kUnits{{{"y", 365 * 86400 * kNsPerSecond},
                                               {"w", 7 * 86400 * kNsPerSecond},
                                               {"d", 86400 * kNsPerSecond},
                                               {"h", 3600 * kNsPerSecond},
                                               {"ms", 1'000'000},
                                               {"m", 60 * kNsPerSecond},
                                               {"s", kNsPerSecond}}};
  int64_t total = 0;
  size_t pos = 0, lastUnit = 0;  // index + 1 into kUnits of the previous unit: units go down
  bool any = false;
  while (pos < text.size()) {
    int64_t n = 0;
    size_t start = pos;
    for (; pos < text.size() && text[pos] >= '0' && text[pos] <= '9'; pos++) {
      if (n > (std::numeric_limits<int64_t>::max() - 9) / 10) return bad("too large");
      n = n * 10 + (text[pos] - '0');
    }
    if (pos == start)
      return bad("a number expected at \"" + std::string(text.substr(pos, 8)) + "\"");
    size_t unit = 0;
    for (size_t i = 0; i < kUnits.size(); i++)
      if (text.substr(pos, kUnits[i].name.size()) == kUnits[i].name) {
        unit = i + 1;
        break;
      }
    if (unit == 0) return bad("a unit (y, w, d, h, m, s, ms) expected after " + std::to_string(n));
    // "ms" sits before "m" in the table for matching, but is the smaller unit.
    auto rank = [](size_t u) { return u == 5 ? 7 : u == 6 ? 5 : u == 7 ? 6 : u; };
    if (lastUnit != 0 && rank(unit) <= rank(lastUnit)) return bad("units out of order or repeated");
    lastUnit = unit;
    const int64_t ns = kUnits[unit - 1].ns;
    if (n > (std::numeric_limits<int64_t>::max() - total) / ns) return bad("too large");
    total += n * ns;
    pos += kUnits[unit - 1].name.size();
    any = true;
  }
  if (!any) return bad("empty");
  return total;
}

}  // namespace rc::alerts
