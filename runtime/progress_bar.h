#ifndef NEREID_RUNTIME_PROGRESS_BAR_H_
#define NEREID_RUNTIME_PROGRESS_BAR_H_

// What `nereid run` prints while it trains: a bar redrawn in place on a
// terminal, a plain line every tenth of an epoch otherwise (logs, CI), and a
// line per epoch.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "runtime/trainer.h"

namespace nereid {

// Set to 1 by the local launcher when its own output is a terminal: a
// worker's output reaches it through the launcher, which redraws the bar.
inline constexpr char kProgressTerminalEnvVar[] = "NEREID_PROGRESS_TERMINAL";

class ProgressBar {
 public:
  // `max_steps` > 0 ends the run early: the totals shown say so.
  // `token`: what one position of sequence data is ("char" for text), for
  // the bits-per-position figure.
  ProgressBar(std::FILE* out, int64_t epochs, int64_t steps_per_epoch, int64_t max_steps, std::string token = "token")
      : out_(out),
        tty_(out != nullptr && IsTerminal(out)),
        epochs_(epochs),
        steps_(steps_per_epoch),
        total_(max_steps > 0 ? std::min(max_steps, epochs * steps_per_epoch) : epochs * steps_per_epoch),
        token_(std::move(token)),
        start_(absl::Now()) {}

  // Steps the run takes in all (max_steps honoured).
  int64_t total() const { return total_; }

  void Step(int64_t epoch, int64_t step, double loss, double samples_per_second);

  // A line of its own, whatever the bar is doing.
  void Warn(const std::string& text);

  void EpochDone(const EpochMetrics& m);
  // A test-set score within an epoch (--eval-every).
  void EvaluatedAt(const EpochMetrics& m);

 private:
  static bool IsTerminal(std::FILE* out);
  // " (2.310 bits/char)" for sequence data, else "".
  std::string Bits(const EpochMetrics& m) const;
  // "ETA 1m05s" for the run's remaining steps at the pace of the steps this
  // process ran (evaluation between epochs not counted); "" once done.
  std::string Eta(absl::Time now, int64_t done) const;

  std::FILE* out_;
  bool tty_;
  int64_t epochs_, steps_, total_;
  int64_t first_done_ = -1;  // steps done before this process's first
  std::string token_;
  absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
};

}  // namespace nereid

#endif  // NEREID_RUNTIME_PROGRESS_BAR_H_
