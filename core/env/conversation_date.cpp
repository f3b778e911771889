#include "core/env/conversation_date.h"

#include <array>
#include <cstdio>
#include <stdexcept>

namespace engram::env {
namespace {

constexpr std::array<const char*, 12> kMonthNames = {
    "January", "February", "March",     "April",   "May",      "June",
    "July",    "August",   "September", "October", "November", "December"};

}  // namespace

// Hinnant's days_from_civil / civil_from_days (chrono-compatible algorithms, exact for all
// int32 years), so the library needs no <chrono> calendar support.
int64_t CalendarDate::day_number() const {
  const int64_t y = year - (month <= 2 ? 1 : 0);
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

CalendarDate CalendarDate::from_day_number(int64_t days) {
  days += 719468;
  const int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const int64_t doe = days - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  CalendarDate d;
  d.day = static_cast<int32_t>(doy - (153 * mp + 2) / 5 + 1);
  d.month = static_cast<int32_t>(mp < 10 ? mp + 3 : mp - 9);
  d.year = static_cast<int32_t>(yoe + era * 400 + (d.month <= 2 ? 1 : 0));
  return d;
}

std::string CalendarDate::iso() const {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%04d-%02d-%02d", year, month, day);
  return buffer;
}

std::string CalendarDate::text() const {
  return std::string(kMonthNames.at(month - 1)) + " " + std::to_string(day) + ", " +
         std::to_string(year);
}

CalendarDate CalendarDate::parse_iso(const std::string& iso) {
  CalendarDate d;
  char tail = 0;
  if (iso.size() != 10 ||
      std::sscanf(iso.c_str(), "%4d-%2d-%2d%c", &d.year, &d.month, &d.day, &tail) != 3 ||
      d.month < 1 || d.month > 12 || d.day < 1 || from_day_number(d.day_number()) != d) {
    throw std::invalid_argument("not an ISO date (YYYY-MM-DD): '" + iso + "'");
  }
  return d;
}

int64_t days_between(const CalendarDate& a, const CalendarDate& b) {
  return b.day_number() - a.day_number();
}

}  // namespace engram::env
