#include "core/trace.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace nereid {
namespace {

using ::google::protobuf::Struct;
using ::google::protobuf::Value;

// Parses the trace with protobuf's JSON parser (strict: unbalanced or
// malformed text fails) and returns its traceEvents, each checked for the
// fields every viewer needs.
std::vector<Struct> ParseEvents(const std::string& json) {
  Struct doc;
  auto status = google::protobuf::util::JsonStringToMessage(json, &doc);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  auto it = doc.fields().find("traceEvents");
  EXPECT_NE(it, doc.fields().end());
  std::vector<Struct> events;
  if (it == doc.fields().end()) return events;
  for (const Value& v : it->second.list_value().values()) {
    const Struct& e = v.struct_value();
    for (const char* key : {"name", "ph", "pid", "tid"}) EXPECT_TRUE(e.fields().contains(key)) << key;
    const std::string& ph = e.fields().at("ph").string_value();
    EXPECT_TRUE(ph == "M" || e.fields().contains("ts")) << ph;
    EXPECT_TRUE(ph != "X" || e.fields().contains("dur"));
    EXPECT_TRUE((ph != "b" && ph != "e") || e.fields().contains("id"));
    events.push_back(e);
  }
  return events;
}

std::string Str(const Struct& e, const char* key) { return e.fields().at(key).string_value(); }
double Num(const Struct& e, const char* key) { return e.fields().at(key).number_value(); }

TEST(TraceTest, ThreadsRecordOnTracksOfTheirOwn) {
  TraceRecorder trace(/*pid=*/3);
  trace.NameTrack(1000, "collectives");
  constexpr int kThreads = 4, kEach = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&trace, t] {
      for (int i = 0; i < kEach; ++i) {
        absl::Time begin = absl::Now();
        trace.Complete(absl::StrCat("node", t), "MatMul", begin, begin + absl::Microseconds(5), {{"step", i}});
      }
      trace.CompleteOnTrack(1000, "allreduce bucket 0", "comm", absl::Now(), absl::Now(), {{"bucket", 0}});
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(trace.recorded(), kThreads * (kEach + 1));
  EXPECT_EQ(trace.dropped(), 0);

  std::vector<Struct> events = ParseEvents(trace.ToJson());
  std::map<std::string, std::set<double>> tids_by_name;
  int complete = 0;
  bool named_collectives = false;
  for (const Struct& e : events) {
    EXPECT_EQ(Num(e, "pid"), 3);
    if (Str(e, "ph") == "M" && Str(e, "name") == "thread_name") {
      const Struct& args = e.fields().at("args").struct_value();
      named_collectives |= Num(e, "tid") == 1000 && args.fields().at("name").string_value() == "collectives";
    }
    if (Str(e, "ph") != "X") continue;
    ++complete;
    tids_by_name[Str(e, "name")].insert(Num(e, "tid"));
    if (Str(e, "cat") == "MatMul") {
      EXPECT_DOUBLE_EQ(Num(e, "dur"), 5);
      EXPECT_GE(Num(e, "ts"), 0);
      EXPECT_TRUE(e.fields().at("args").struct_value().fields().contains("step"));
    }
  }
  EXPECT_EQ(complete, kThreads * (kEach + 1));
  EXPECT_TRUE(named_collectives);
  // One small tid per thread, the same for all its events.
  std::set<double> tids;
  for (int t = 0; t < kThreads; ++t) {
    const std::set<double>& of_thread = tids_by_name[absl::StrCat("node", t)];
    ASSERT_EQ(of_thread.size(), 1u);
    EXPECT_GE(*of_thread.begin(), 1);
    EXPECT_LE(*of_thread.begin(), kThreads);
    tids.insert(*of_thread.begin());
  }
  EXPECT_EQ(tids.size(), static_cast<size_t>(kThreads));
  EXPECT_EQ(tids_by_name["allreduce bucket 0"], std::set<double>{1000});
}

TEST(TraceTest, AsyncSpanIsAPairWithOneId) {
  TraceRecorder trace;
  absl::Time begin = absl::Now();
  trace.Async("grad/allreduce", "wait", begin, begin + absl::Milliseconds(2), {{"step", 7}});
  std::vector<Struct> events = ParseEvents(trace.ToJson());
  std::vector<Struct> pair;
  for (const Struct& e : events) {
    if (Str(e, "ph") == "b" || Str(e, "ph") == "e") pair.push_back(e);
  }
  ASSERT_EQ(pair.size(), 2u);
  EXPECT_EQ(Str(pair[0], "ph"), "b");
  EXPECT_EQ(Str(pair[1], "ph"), "e");
  EXPECT_EQ(Num(pair[0], "id"), Num(pair[1], "id"));
  EXPECT_EQ(Str(pair[1], "cat"), "wait");
  EXPECT_NEAR(Num(pair[1], "ts") - Num(pair[0], "ts"), 2000, 1e-6);
}

// SetOrigin moves every timestamp onto the agreed clock: an origin 5 ms
// before this recorder's start puts its first span 5 ms later in the file.
TEST(TraceTest, TimestampsCountFromTheOriginSet) {
  TraceRecorder trace;
  const absl::Time begin = trace.start() + absl::Milliseconds(1);
  trace.Complete("a", "step", begin, begin + absl::Milliseconds(1));
  auto ts_of_a = [&] {
    for (const Struct& e : ParseEvents(trace.ToJson())) {
      if (Str(e, "name") == "a") return Num(e, "ts");
    }
    return -1.0;
  };
  EXPECT_NEAR(ts_of_a(), 1000, 1e-3);
  trace.SetOrigin(trace.start() - absl::Milliseconds(5));
  EXPECT_NEAR(ts_of_a(), 6000, 1e-3);
}

TEST(TraceTest, StopsAtTheBoundAndSaysSo) {
  TraceRecorder trace(0, /*max_events=*/10);
  for (int i = 0; i < 15; ++i) trace.Complete("n", "Op", absl::Now(), absl::Now());
  EXPECT_EQ(trace.recorded(), 10);
  EXPECT_EQ(trace.dropped(), 5);
  bool noted = false;
  for (const Struct& e : ParseEvents(trace.ToJson())) {
    if (Str(e, "name") != "trace truncated") continue;
    noted = true;
    EXPECT_EQ(Str(e, "ph"), "i");
    EXPECT_EQ(e.fields().at("args").struct_value().fields().at("dropped_events").number_value(), 5);
  }
  EXPECT_TRUE(noted);
}

TEST(TraceTest, SpanRecordsOnceAndNothingWithoutARecorder) {
  TraceSpan nothing(nullptr, "never", "step");
  nothing.End();
  TraceRecorder trace;
  {
    TraceSpan span(&trace, "step 0", "step", {{"step", 0}});
    span.End();
  }
  {
    TraceSpan span(&trace, "evaluate", "eval");
  }
  EXPECT_EQ(trace.recorded(), 2);
}

TEST(TraceTest, NamesAreEscaped) {
  TraceRecorder trace;
  trace.Complete("a \"quoted\"\\name\n", "Op", absl::Now(), absl::Now());
  bool found = false;
  for (const Struct& e : ParseEvents(trace.ToJson())) found |= Str(e, "name") == "a \"quoted\"\\name\n";
  EXPECT_TRUE(found);
}

// The file as other tools read it: Python's json module, when there is one.
TEST(TraceTest, WritesAFileThatPythonReads) {
  TraceRecorder trace(1);
  trace.NameThisThread("driver");
  trace.Complete("fc1/matmul", "MatMul", absl::Now(), absl::Now() + absl::Microseconds(3), {{"step", 0}});
  std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/trace.json";
  ASSERT_TRUE(trace.WriteJson(path).ok());
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(ParseEvents(text.str()).size(), 3u);  // process name, thread name, the node
  if (std::system("test -x /usr/bin/python3") != 0) GTEST_SKIP() << "no /usr/bin/python3";
  std::string check = absl::StrCat(
      "/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
      "e=[x for x in d[\"traceEvents\"] if x[\"ph\"]==\"X\"]; "
      "assert e[0][\"name\"]==\"fc1/matmul\" and e[0][\"pid\"]==1 and e[0][\"dur\"]>=0, e' ",
      path);
  EXPECT_EQ(std::system(check.c_str()), 0);
}

TEST(TraceTest, RankPaths) {
  EXPECT_EQ(TracePathForRank("trace.json", 0, 1), "trace.json");
  EXPECT_EQ(TracePathForRank("trace.json", 0, 2), "trace.rank0.json");
  EXPECT_EQ(TracePathForRank("out/run.v2/trace.json", 1, 2), "out/run.v2/trace.rank1.json");
  EXPECT_EQ(TracePathForRank("/tmp/trace", 3, 4), "/tmp/trace.rank3");
}

}  // namespace
}  // namespace nereid
