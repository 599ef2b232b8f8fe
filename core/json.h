#ifndef NEREID_CORE_JSON_H_
#define NEREID_CORE_JSON_H_

// JSON goes through one library, nlohmann-json (Debian's nlohmann-json3-dev).
// Reports and metrics build an ordered_json (keys in the order written) and
// turn it into text here: compact, one line, a trailing newline, and bytes
// that are not UTF-8 (a path from the command line may hold any) replaced by
// U+FFFD rather than throwing.

#include <string>

#include "nlohmann/json.hpp"

namespace nereid {

using Json = nlohmann::ordered_json;

inline std::string JsonLine(const Json& document) {
  return document.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// A string as a JSON string literal, quotes included (streaming writers).
inline std::string JsonQuoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace nereid

#endif  // NEREID_CORE_JSON_H_
