#include "comm/rendezvous_spec.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace nereid {
namespace {

constexpr absl::string_view kSyntax = "expected file:/some/dir, redis://host:port or tcp://host:port";

absl::Status Bad(absl::string_view spec, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("rendezvous spec '", spec, "': ", why, " (", kSyntax, ")"));
}

// host[:port] of a Redis or TCP spec; `port_required` for TCP (no default).
absl::StatusOr<RendezvousSpec> ParseHostPort(absl::string_view spec, absl::string_view rest, RendezvousSpec::Kind kind,
                                             bool port_required) {
  RendezvousSpec out;
  out.kind = kind;
  absl::ConsumeSuffix(&rest, "/");
  absl::string_view port_text;
  if (absl::ConsumePrefix(&rest, "[")) {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) return Bad(spec, "'[' without ']' around the host");
    out.host = std::string(rest.substr(0, close));
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (!absl::ConsumePrefix(&rest, ":")) return Bad(spec, "expected ':port' after ']'");
      port_text = rest;
      if (port_text.empty()) return Bad(spec, "empty port");
    }
  } else {
    const size_t colon = rest.rfind(':');
    if (colon == absl::string_view::npos) {
      out.host = std::string(rest);
    } else {
      out.host = std::string(rest.substr(0, colon));
      port_text = rest.substr(colon + 1);
      if (port_text.empty()) return Bad(spec, "empty port");
    }
    if (absl::StrContains(out.host, ':')) return Bad(spec, "put an IPv6 host in brackets");
  }
  if (out.host.empty()) return Bad(spec, "empty host");
  if (absl::StrContains(out.host, '/')) return Bad(spec, "a host:port spec has no path");
  if (port_required && port_text.empty()) return Bad(spec, "the port is required");
  if (!port_text.empty()) {
    int port = 0;
    if (!absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
      return Bad(spec, absl::StrCat("port '", port_text, "' is not a number in 1..65535"));
    }
    out.port = port;
  }
  return out;
}

}  // namespace

std::string RendezvousSpec::ToString() const {
  if (kind == Kind::kFile) return absl::StrCat("file:", path);
  const bool bracket = absl::StrContains(host, ':');
  return absl::StrCat(kind == Kind::kTcp ? "tcp://" : "redis://", bracket ? "[" : "", host, bracket ? "]" : "", ":", port);
}

absl::StatusOr<RendezvousSpec> ParseRendezvousSpec(absl::string_view spec, absl::string_view run_id) {
  if (run_id.empty()) return absl::InvalidArgumentError("rendezvous run id is empty");
  if (absl::StrContains(run_id, '/')) {
    return absl::InvalidArgumentError(absl::StrCat("rendezvous run id '", run_id, "' contains '/'"));
  }
  absl::string_view rest = spec;
  absl::StatusOr<RendezvousSpec> out;
  if (absl::ConsumePrefix(&rest, "redis://")) {
    out = ParseHostPort(spec, rest, RendezvousSpec::Kind::kRedis, /*port_required=*/false);
  } else if (absl::ConsumePrefix(&rest, "tcp://")) {
    out = ParseHostPort(spec, rest, RendezvousSpec::Kind::kTcp, /*port_required=*/true);
  } else if (absl::ConsumePrefix(&rest, "file:")) {
    // file:///dir and file:/dir both name /dir.
    if (absl::StartsWith(rest, "//")) rest.remove_prefix(2);
    if (rest.empty()) return Bad(spec, "empty directory");
    RendezvousSpec file;
    file.kind = RendezvousSpec::Kind::kFile;
    file.path = std::string(rest);
    out = file;
  } else if (spec.empty()) {
    return Bad(spec, "empty");
  } else {
    return Bad(spec, "unknown scheme");
  }
  if (out.ok()) out->run_id = std::string(run_id);
  return out;
}

}  // namespace nereid
