// Calendar dates for the conversation world: sessions, events and changes happen on days, and
// temporal questions ask for a day or a number of days. Proleptic Gregorian, no time zones.
#pragma once

#include <cstdint>
#include <string>

namespace engram::env {

struct CalendarDate {
  int32_t year = 2023;
  int32_t month = 1;  // 1..12
  int32_t day = 1;    // 1..31

  // Days since 1970-01-01 (negative before).
  int64_t day_number() const;
  static CalendarDate from_day_number(int64_t days);
  CalendarDate plus_days(int64_t days) const { return from_day_number(day_number() + days); }

  std::string iso() const;   // "2023-05-14"
  std::string text() const;  // "May 14, 2023": how sessions are dated and dates are answered
  // Parses "YYYY-MM-DD"; throws std::invalid_argument naming the text when it is not a valid date.
  static CalendarDate parse_iso(const std::string& iso);

  friend bool operator==(const CalendarDate&, const CalendarDate&) = default;
};

// b - a in days.
int64_t days_between(const CalendarDate& a, const CalendarDate& b);

}  // namespace engram::env
