#include "graph/plan_io.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file_io.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace nereid {
namespace {

// Parse errors are expected here (most files are graphs): stay quiet.
class IgnoreErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, int, const std::string&) override {}
  void AddWarning(int, int, const std::string&) override {}
};

}  // namespace

absl::StatusOr<std::optional<PlanDef>> ReadPlanFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadGraphFileContents(path);
  if (!contents.ok()) return contents.status();
  PlanDef plan;
  if (absl::EndsWith(path, ".plan.pb")) {
    if (contents->size() > static_cast<size_t>(INT32_MAX) ||
        !plan.ParseFromArray(contents->data(), static_cast<int>(contents->size()))) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a valid binary PlanDef"));
    }
  } else {
    if (GuessGraphFormat(path, *contents) == GraphFormat::kBinary) return std::nullopt;
    google::protobuf::TextFormat::Parser parser;
    IgnoreErrors quiet;
    parser.RecordErrorsTo(&quiet);
    if (!parser.ParseFromString(*contents, &plan) || plan.worker_size() == 0) return std::nullopt;
  }
  if (plan.version() < 0 || plan.version() > kPlanFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": plan format version ", plan.version(),
                                                   " is not supported (this Nereid reads version ",
                                                   kPlanFormatVersion, ")"));
  }
  return plan;
}

absl::Status WritePlanFile(const PlanDef& plan, const std::string& path) {
  std::string contents;
  if (absl::EndsWith(path, ".pb")) {
    if (!plan.SerializeToString(&contents)) {
      return absl::InternalError(absl::StrCat(path, ": cannot serialise the plan"));
    }
  } else {
    google::protobuf::TextFormat::Printer printer;
    printer.PrintToString(plan, &contents);
  }
  return WriteFileAtomically(path, contents);
}

}  // namespace nereid
