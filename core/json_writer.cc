#include "core/json_writer.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace nereid {

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ",";
    first_.back() = false;
  }
}

void JsonWriter::BeginObject() {
  BeforeValue();
  out_ += "{";
  first_.push_back(true);
}

void JsonWriter::EndObject() {
  first_.pop_back();
  out_ += "}";
}

void JsonWriter::BeginArray() {
  BeforeValue();
  out_ += "[";
  first_.push_back(true);
}

void JsonWriter::EndArray() {
  first_.pop_back();
  out_ += "]";
}

void JsonWriter::Key(absl::string_view key) {
  BeforeValue();
  absl::StrAppend(&out_, Escape(key), ":");
  after_key_ = true;
}

void JsonWriter::String(absl::string_view value) {
  BeforeValue();
  out_ += Escape(value);
}

void JsonWriter::Int(int64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
}

void JsonWriter::Double(double value) {
  BeforeValue();
  if (!std::isfinite(value)) {
    out_ += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", value);
  out_ += buf;
}

void JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
}

void JsonWriter::Null() {
  BeforeValue();
  out_ += "null";
}

void JsonWriter::Member(absl::string_view key, int64_t value) {
  Key(key);
  Int(value);
}

void JsonWriter::Member(absl::string_view key, absl::string_view value) {
  Key(key);
  String(value);
}

void JsonWriter::Member(absl::string_view key, double value) {
  Key(key);
  Double(value);
}

std::string JsonWriter::Take() {
  std::string result = std::move(out_);
  result += "\n";
  out_.clear();
  first_.clear();
  after_key_ = false;
  return result;
}

std::string JsonWriter::Escape(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  return out;
}

}  // namespace nereid
