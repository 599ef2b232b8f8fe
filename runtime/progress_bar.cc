#include "runtime/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/terminal_width.h"

namespace nereid {

bool ProgressBar::IsTerminal(std::FILE* out) {
  if (isatty(fileno(out)) != 0) return true;
  const char* through_launcher = std::getenv(kProgressTerminalEnvVar);
  return through_launcher != nullptr && std::string(through_launcher) == "1";
}

void ProgressBar::Step(int64_t epoch, int64_t step, double loss, double samples_per_second) {
  if (out_ == nullptr) return;
  absl::Time now = absl::Now();
  // This epoch's steps: all of them, or those before max_steps ends the run.
  const int64_t in_epoch = std::max<int64_t>(1, std::min(steps_, total_ - epoch * steps_));
  const int64_t done = epoch * steps_ + step + 1;
  bool last = step + 1 == in_epoch;
  if (first_done_ < 0) first_done_ = done - 1;  // a resumed run starts mid-way
  if (tty_) {
    if (!last && now - last_draw_ < absl::Milliseconds(100)) return;
    last_draw_ = now;
    const std::string eta = Eta(now, done);
    int width = 30, filled = static_cast<int>(width * (step + 1) / in_epoch);
    // Through the local launcher the draw ends with '\r' too, so the
    // launcher shows it at once rather than when the next one starts.
    const bool direct = isatty(fileno(out_)) != 0;
    const std::string line = absl::StrFormat(
        "epoch %d/%d [%s%s] %d/%d loss %.4f %.0f samples/s %s ", epoch + 1, epochs_, std::string(filled, '='),
        std::string(width - filled, ' '), step + 1, in_epoch, loss, samples_per_second, eta);
    // On this terminal, cut to its width (a wrapped line cannot be redrawn);
    // through the launcher, which cuts it there, end with '\r' instead.
    std::fprintf(out_, "\r%s%s", direct ? FitToColumns(line, TerminalColumns(fileno(out_))).c_str() : line.c_str(),
                 direct ? "" : "\r");
    std::fflush(out_);
    return;
  }
  int64_t every = std::max<int64_t>(1, in_epoch / 10);
  if ((step + 1) % every == 0 || last) {
    const std::string eta = Eta(now, done);
    std::fprintf(out_, "epoch %lld/%lld step %lld/%lld loss %.4f %.0f samples/s %s\n",
                 static_cast<long long>(epoch + 1), static_cast<long long>(epochs_),
                 static_cast<long long>(step + 1), static_cast<long long>(in_epoch), loss, samples_per_second,
                 eta.c_str());
    std::fflush(out_);
  }
}

void ProgressBar::Warn(const std::string& text) {
  if (out_ == nullptr) return;
  std::fprintf(out_, "%swarning: %s\n", tty_ ? "\n" : "", text.c_str());
  std::fflush(out_);
}

void ProgressBar::EpochDone(const EpochMetrics& m) {
  if (out_ == nullptr) return;
  const std::string& consensus = m.note;
  const std::string speed = m.tokens_per_second > 0 ? absl::StrFormat("%.0f %ss/s", m.tokens_per_second, token_)
                                                    : absl::StrFormat("%.0f samples/s", m.samples_per_second);
  std::fprintf(out_, "%sepoch %lld: train loss %.4f, test accuracy %.2f%%, test loss %.4f%s%s, %s, %.1f s\n",
               tty_ ? "\n" : "", static_cast<long long>(m.epoch + 1), m.train_loss, 100 * m.test_accuracy,
               m.test_loss, Bits(m).c_str(), consensus.c_str(), speed.c_str(), m.seconds);
  std::fflush(out_);
}

void ProgressBar::EvaluatedAt(const EpochMetrics& m) {
  if (out_ == nullptr) return;
  std::fprintf(out_, "%sstep %lld (epoch %lld): test accuracy %.2f%%, test loss %.4f%s%s, %.1f s in\n",
               tty_ ? "\n" : "", static_cast<long long>(m.step), static_cast<long long>(m.epoch + 1),
               100 * m.test_accuracy, m.test_loss, Bits(m).c_str(), m.note.c_str(), m.seconds);
  std::fflush(out_);
}

std::string ProgressBar::Bits(const EpochMetrics& m) const {
  return m.test_bits_per_token > 0 ? absl::StrFormat(" (%.3f bits/%s)", m.test_bits_per_token, token_) : "";
}

std::string ProgressBar::Eta(absl::Time now, int64_t done) const {
  if (done >= total_ || done <= first_done_) return "";
  const double per_step = absl::ToDoubleSeconds(now - start_) / static_cast<double>(done - first_done_);
  const int64_t seconds = static_cast<int64_t>(std::ceil(per_step * static_cast<double>(total_ - done)));
  if (seconds < 60) return absl::StrCat("ETA ", seconds, "s");
  if (seconds < 3600) return absl::StrFormat("ETA %lldm%02llds", static_cast<long long>(seconds / 60),
                                             static_cast<long long>(seconds % 60));
  return absl::StrFormat("ETA %lldh%02lldm", static_cast<long long>(seconds / 3600),
                         static_cast<long long>(seconds % 3600 / 60));
}

}  // namespace nereid
