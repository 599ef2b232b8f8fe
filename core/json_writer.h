#ifndef NEREID_CORE_JSON_WRITER_H_
#define NEREID_CORE_JSON_WRITER_H_

// A small streaming JSON writer for reports and metrics: objects, arrays,
// strings (escaped), integers, doubles (non-finite values become null), bools.
// Commas are inserted automatically.
//
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("model"); w.String("lenet");
//   w.EndObject();
//   std::string json = w.Take();

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace nereid {

class JsonWriter {
 public:
  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  void Key(absl::string_view key);
  void String(absl::string_view value);
  void Int(int64_t value);
  void Double(double value);
  void Bool(bool value);
  void Null();

  // Key followed by a value, for flat records.
  void Member(absl::string_view key, int64_t value);
  void Member(absl::string_view key, absl::string_view value);
  void Member(absl::string_view key, double value);

  // The document so far, with a trailing newline.
  std::string Take();

  static std::string Escape(absl::string_view s);

 private:
  void BeforeValue();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace nereid

#endif  // NEREID_CORE_JSON_WRITER_H_
