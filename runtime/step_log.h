#ifndef NEREID_RUNTIME_STEP_LOG_H_
#define NEREID_RUNTIME_STEP_LOG_H_

// `--log-jsonl PATH`: the run as it happens, one JSON object per line, each
// line flushed as it is written (follow it with `tail -f`, plot it while the
// run goes on, or read what a killed run got to):
//   {"event":"start","time":...,"version":...,"model":...,"workers":...,"rank":...,
//    "epochs":...,"steps":...}                    steps: the run's total, --max-steps honoured
//   {"event":"step","time":...,"epoch":1,"step":1,"loss":...,"step_seconds":...,
//    "samples":...,"bytes_sent":...}              bytes this rank sent since the line before
//   {"event":"epoch","time":...,"epoch":1,"train_loss":...,"test_accuracy":...,
//    "test_loss":...,"samples_per_second":...,"seconds":...}   as in --metrics-json
//   {"event":"end","time":...,"steps":...,"seconds":...}
// `time` is Unix seconds; epochs and steps count from 1. The rank that holds
// the loss writes it (rank 0 unless the plan places the loss elsewhere).

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/json.h"

namespace nereid {

class StepLog {
 public:
  // Creates (truncates) `path`; an error names it.
  static absl::StatusOr<std::unique_ptr<StepLog>> Open(const std::string& path);
  ~StepLog();

  // Writes `fields` as one line, with "event" first and "time" second.
  // A failed write (a full disk) is reported once, at Close.
  void Write(const std::string& event, const Json& fields);
  // Closes the file; the first write error, if any, naming the path.
  absl::Status Close();

 private:
  StepLog(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  std::FILE* file_;
  std::string path_;
  bool failed_ = false;
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_STEP_LOG_H_
