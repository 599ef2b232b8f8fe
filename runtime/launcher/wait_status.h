#ifndef NEREID_RUNTIME_LAUNCHER_WAIT_STATUS_H_
#define NEREID_RUNTIME_LAUNCHER_WAIT_STATUS_H_

// Words for how a process ended, from the status waitpid() returned:
// "exited with code 3", "was killed by signal 9 (SIGKILL)",
// "was killed by signal 11 (SIGSEGV, core dumped)".

#include <string>

namespace nereid {
namespace launcher {

// "SIGKILL" for 9; "SIG42" for a number without a name here.
std::string SignalName(int signal_number);

// The phrase above for a status from waitpid(); "ended with wait status N"
// for anything that is neither an exit nor a signal.
std::string DescribeWaitStatus(int wait_status);

}  // namespace launcher
}  // namespace nereid

#endif  // NEREID_RUNTIME_LAUNCHER_WAIT_STATUS_H_
