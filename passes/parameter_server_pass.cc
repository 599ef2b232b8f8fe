// parameter_server: synchronous training with parameter servers (PHub's
// shape: Luo et al., 2018; BytePS's push-pull). The plan's last `servers`
// ranks are servers, the others workers. Each trained parameter lives on one
// server (parameters balanced by size over the servers), with its optimizer
// state and update nodes, which the optimizer passes made and which move
// with it unchanged. Every step each worker pushes its gradients; the server
// averages them, updates the parameter and sends the new value straight
// back, which the worker keeps for the next step (its copy of the
// parameter, carried by a Feedback). So a parameter's pull follows its push
// within the step, overlapping the backward pass and the other parameters'
// pushes, and evaluation reads the workers' copies with no transfer. Values
// travel in chunks of at most `chunk_kb`, each chunk its own message and its
// own aggregation on the server (the server's executor sums the chunks of
// different parameters in parallel on its cores).
//
//   worker:    gradient -> flat -> chunk k -> Send to s              (push)
//   server s:  Recv chunk k from each worker -> sum -> x 1/workers -> concat
//              -> reshape -> the optimizer's update of P -> P's next value
//   server s:  next value -> flat -> chunk k -> Send to each worker  (pull)
//   worker:    Recv chunk k from s -> concat -> reshape -> the copy's next
//              value; the forward pass reads the copy
//
// A worker's copy starts from P's initialiser, so every copy and P start
// equal. The worker nodes run on the role `ps_workers`
// (graph/placement.h), every server node on its rank; the Send/Recv ends
// are written with their peers (one rank's end to each member of the role),
// so the plan checker matches them like any pair. The arithmetic is
// data_parallel's: the mean of the workers' gradients, applied once.

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "graph/placement.h"
#include "graph/process_groups.h"
#include "ops/gradient_builder.h"
#include "ops/op_registry.h"
#include "ops/shape_inference.h"
#include "passes/colocated_shards.h"
#include "passes/gradient_delay.h"
#include "passes/optimizer_common.h"
#include "passes/pass.h"
#include "passes/pass_properties.h"

namespace nereid {
namespace {

constexpr char kWorkerRole[] = "ps_workers";
constexpr int64_t kMaxChannels = 1 << 10;  // the point-to-point tag's channel bits
// chunk_kb=0 (the default): 256 KiB, raised where a model needs more chunks
// than there are channels. Smaller chunks let a chunk's pull follow its push
// more closely, and pay a message's fixed cost more often: on 45 Mbit/s links
// 32 KiB runs lenet and mlp 1.3x faster than 256 KiB, on loopback mlp 2.4x
// slower (docs/PARAMETER_SERVER.md, "Chunk size").
constexpr int64_t kDefaultChunkKb = 256;
// Colocated servers exchanging by collectives: buckets of data_parallel's
// default size (chunk_kb, when given, caps them instead).
constexpr int64_t kDefaultBucketKb = 4096;

// The nodes a worker runs: everything the gradients, the loss and the
// scores depend on, except the trained parameters themselves (pulled).
absl::flat_hash_set<const Node*> WorkerNodes(const Graph& graph, const std::vector<GradientOfParameter>& trained) {
  absl::flat_hash_set<const Node*> parameters, seen;
  for (const GradientOfParameter& t : trained) parameters.insert(t.parameter);
  std::vector<const Node*> stack;
  for (const GradientOfParameter& t : trained) stack.push_back(t.gradient->input_edge(0)->src);
  for (const char* attr : {"loss", "logits"}) {
    if (const Node* n = graph.FindNode(GraphAttr(graph, attr))) stack.push_back(n);
  }
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (parameters.contains(n) || !seen.insert(n).second) continue;
    for (int i = 0; i < n->num_inputs(); ++i) stack.push_back(n->input_edge(i)->src);
    for (const Edge* e : n->control_inputs()) stack.push_back(e->src);
  }
  return seen;
}

// The update of `p` when it can run chunk by chunk on the server, else null:
// an elementwise op (OpDef::elementwise) making P's next value, reading the
// gradient, scalars (the learning rate) and values shaped like P (P, its
// optimizer state), with every output shaped like P, and the gradient read
// by it alone. Then each chunk is updated as soon as its gradients arrive and
// its pull starts at once, so pushes and pulls overlap within a parameter.
Node* ChunkableUpdate(const Node& p, const Node& gradient) {
  Node* update = p.input_edge(0)->src->input_edge(0)->src;  // Feedback <- update
  const OpDef* def = OpRegistry::Global().Find(update->op());
  if (def == nullptr || !def->elementwise || !update->control_inputs().empty()) return nullptr;
  if (gradient.out_edges().size() != 1 || gradient.out_edges()[0]->dst != update) return nullptr;
  const TensorShape& shape = p.outputs()[0].shape;
  for (int i = 0; i < update->num_inputs(); ++i) {
    const Edge* e = update->input_edge(i);
    const TensorShape& in = e->src->outputs()[static_cast<size_t>(e->src_port)].shape;
    if (e->src != &gradient && in.rank() != 0 && in != shape) return nullptr;
  }
  for (const ShapeAndType& out : update->outputs()) {
    if (out.shape != shape) return nullptr;
  }
  return update;
}

// Whether `p`'s update can run on state kept chunk by chunk: every input
// shaped like the parameter, but the gradient, is a Parameter read once by
// the update (the parameter itself, its optimizer state), which nothing
// else reads but the workers (the parameter, through their copy).
bool StateInputsOnly(const Node& p, const Node& update, const Node& gradient,
                     const absl::flat_hash_set<const Node*>& worker_nodes) {
  absl::flat_hash_set<const Node*> seen;
  for (int i = 0; i < update.num_inputs(); ++i) {
    const Edge* e = update.input_edge(i);
    if (e->src == &gradient || e->src->outputs()[static_cast<size_t>(e->src_port)].shape.rank() == 0) continue;
    const Node* state = e->src;
    if (state->op() != "Parameter" || !state->control_inputs().empty() || !seen.insert(state).second) return false;
    for (const Edge* out : state->out_edges()) {
      if (out->IsControl() || (out->dst != &update && !(state == &p && worker_nodes.contains(out->dst)))) return false;
    }
  }
  return seen.contains(&p);
}

// [begin, size) of each chunk of n elements.
std::vector<std::pair<int64_t, int64_t>> Chunks(int64_t n, int64_t chunk_elements) {
  std::vector<std::pair<int64_t, int64_t>> chunks;
  for (int64_t b = 0; b < n; b += chunk_elements) chunks.emplace_back(b, std::min(chunk_elements, n - b));
  return chunks;
}

// kDefaultChunkKb, doubled until every parameter's chunks fit the channels.
int64_t DefaultChunkKb(const std::vector<GradientOfParameter>& trained, int64_t channels_per_chunk) {
  for (int64_t kb = kDefaultChunkKb;; kb *= 2) {
    int64_t channels = 0;
    for (const GradientOfParameter& t : trained) {
      channels += channels_per_chunk *
                  static_cast<int64_t>(Chunks(t.parameter->outputs()[0].shape.KnownElements(), kb * 1024 / 4).size());
    }
    if (channels <= kMaxChannels || kb >= (int64_t{1} << 30)) return kb;
  }
}

// What Run decides before it builds the chains, shared by its steps: the
// options, the world's split into workers and servers, the trained
// parameters with their chunks and servers, and the counts its notes report.
struct ServerPlan {
  bool colocated = false;
  std::string exchange;  // auto, collective, p2p
  int64_t servers = 0;
  double chunk_kb = 0;  // 0 until ChunkParameters chooses it from the model
  int64_t staleness = 0;
  bool split = false;
  int64_t workers = 0;
  int64_t first_server = 0;  // the rank of server 0
  int64_t channels_per_chunk = 1;
  int64_t chunk_elements = 0;
  std::vector<GradientOfParameter> trained;
  absl::flat_hash_set<const Node*> worker_nodes;
  std::vector<Node*> updates;  // by parameter: its ChunkableUpdate, or null
  std::vector<bool> splits;    // by parameter: whether its chunks may go to different servers
  std::vector<std::vector<std::pair<int64_t, int64_t>>> chunks_of;  // by parameter: [begin, size) of each chunk
  std::vector<std::vector<int>> server_of;                          // by parameter, by chunk: the server's index
  std::vector<int64_t> load;                                        // by server: the elements it holds
  Placement on_workers;
  Node* mean = nullptr;  // the 1/workers every chunk's sum is scaled by
  int64_t channel = 0;   // the next chunk's first channel
  int64_t chunks_total = 0, chunked_updates = 0, split_parameters = 0;
};

// One trained parameter's chain as ServeParameter builds it: the parameter,
// its gradient and update, its server, and what its chunks make for the
// nodes that join them.
struct ParameterChain {
  size_t index = 0;  // in ServerPlan::trained
  Node* p = nullptr;
  Node* gradient = nullptr;
  Node* update = nullptr;  // chunk by chunk (ChunkableUpdate), else null
  bool split = false;      // the chunks, with their state, may be on different servers
  std::vector<int64_t> dims;
  int64_t n = 0;                                      // P's elements
  std::string base;                                   // "ps/<P>": the prefix of the chain's node names
  Placement on_server;                                // the whole parameter's server
  absl::flat_hash_map<const Node*, int> next_output;  // split: state -> the update output carrying it on
  std::vector<NodeOut> flat_inputs;                   // not split: the update's P-shaped inputs, flattened
  const Edge* next_in = nullptr;                      // P's Feedback <- P's next value
  Node* flat_p = nullptr;                             // without an update: P's next value, flattened
  Node* flat_g = nullptr;                             // the workers' gradient, flattened
  std::vector<std::vector<NodeOut>> updated;          // by update output, by chunk
  std::vector<NodeOut> pulled, pushed;                // by chunk
  absl::flat_hash_map<int, Node*> previous_push;      // by server
};

// Chunk k of a parameter: its elements, its server and its channels.
struct ChunkSite {
  size_t k = 0;
  int64_t begin = 0, size = 0;
  std::string name;  // "ps/<P>/chunk<k>"
  int server = 0;    // its server's rank
  Placement on_server;
  int64_t channel = 0;                                   // the push's; the pull's is the chunk's last
  std::vector<std::pair<std::string, AttrValue>> slice;  // the Slice attributes cutting it out
};

// Checks the options against the plan's world and records them, with the
// world's split into workers and servers.
absl::Status ReadOptions(const PassContext& context, ServerPlan& plan) {
  const PassOptions& o = context.options;
  const int64_t world = context.target.workers;
  // Colocated: every rank is a worker and serves a shard (server s on rank
  // s), the reduce-scatter / update / all-gather shape; a rank's pushes
  // to its own shard go through its communicator's self-delivery.
  const bool colocated = o.GetBool("colocated");
  if (colocated && world < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter_server: colocated servers need at least 2 ranks (run with --workers 2 or more), the plan has ",
        std::max<int64_t>(world, 1)));
  }
  const int64_t servers = colocated ? world : o.GetInt("servers");
  if (servers < 1) return absl::InvalidArgumentError("parameter_server: servers must be >= 1");
  if (!colocated && world < servers + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parameter_server: ", servers, " servers need at least ", servers + 1,
        " ranks (workers and servers together: run with --workers ", servers + 1, " or more), the plan has ", world));
  }
  const double chunk_kb = o.GetFloat("chunk_kb");
  if (!(chunk_kb == 0 || chunk_kb >= 1)) {
    return absl::InvalidArgumentError("parameter_server: chunk_kb must be >= 1 (or 0: chosen from the model)");
  }
  const std::string mode = o.GetString("mode");
  if (mode != "sync" && mode != "ssp") {
    return absl::InvalidArgumentError(absl::StrCat("parameter_server: mode=", mode, " is not sync or ssp"));
  }
  const std::string exchange = o.GetString("exchange");
  if (exchange != "auto" && exchange != "collective" && exchange != "p2p") {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter_server: exchange=", exchange, " is not auto, collective or p2p"));
  }
  if (exchange == "collective" && !colocated) {
    return absl::InvalidArgumentError("parameter_server: exchange=collective needs colocated=true (every rank serves)");
  }
  const int64_t staleness = mode == "ssp" ? o.GetInt("staleness") : 0;
  if (staleness < 0 || staleness > 63) {
    return absl::InvalidArgumentError(absl::StrCat("parameter_server: staleness=", staleness, " must be in [0, 63]"));
  }
  plan.colocated = colocated;
  plan.exchange = exchange;
  plan.servers = servers;
  plan.chunk_kb = chunk_kb;
  plan.staleness = staleness;
  plan.split = o.GetBool("split");
  plan.workers = colocated ? world : world - servers;
  plan.first_server = colocated ? 0 : plan.workers;
  // Colocated, a rank's push and pull of a chunk both go to itself: two
  // channels, so that their messages stay apart.
  plan.channels_per_chunk = colocated ? 2 : 1;
  return absl::OkStatus();
}

// Chooses the chunk size (when chunk_kb=0) and cuts each parameter into
// chunks, noting its update and whether its chunks may be split.
void ChunkParameters(ServerPlan& plan) {
  const std::vector<GradientOfParameter>& trained = plan.trained;
  if (plan.chunk_kb == 0) plan.chunk_kb = static_cast<double>(DefaultChunkKb(trained, plan.channels_per_chunk));
  plan.chunk_elements = std::max<int64_t>(1, static_cast<int64_t>(plan.chunk_kb * 1024) / 4);
  // What each parameter's update is (ChunkableUpdate), and whether its
  // chunks may go to different servers (split=true: every P-shaped input
  // of the update is state, which is then kept chunk by chunk).
  plan.updates.resize(trained.size());
  plan.splits.resize(trained.size());
  plan.chunks_of.resize(trained.size());
  for (size_t i = 0; i < trained.size(); ++i) {
    plan.updates[i] = ChunkableUpdate(*trained[i].parameter, *trained[i].gradient);
    plan.splits[i] = plan.split && plan.updates[i] != nullptr &&
                     StateInputsOnly(*trained[i].parameter, *plan.updates[i], *trained[i].gradient, plan.worker_nodes);
    plan.chunks_of[i] = Chunks(trained[i].parameter->outputs()[0].shape.KnownElements(), plan.chunk_elements);
  }
}

// Parameters (or, split, their chunks) to servers, largest first onto the
// least loaded.
void AssignServers(ServerPlan& plan) {
  const std::vector<GradientOfParameter>& trained = plan.trained;
  struct Item {
    size_t parameter;
    int chunk;  // -1: the whole parameter
    int64_t elements;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < trained.size(); ++i) {
    if (plan.splits[i]) {
      for (size_t k = 0; k < plan.chunks_of[i].size(); ++k) {
        items.push_back({i, static_cast<int>(k), plan.chunks_of[i][k].second});
      }
    } else {
      items.push_back({i, -1, trained[i].parameter->outputs()[0].shape.KnownElements()});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.elements > b.elements; });
  plan.load = std::vector<int64_t>(static_cast<size_t>(plan.servers), 0);
  plan.server_of.resize(trained.size());
  for (size_t i = 0; i < trained.size(); ++i) plan.server_of[i].resize(plan.chunks_of[i].size());
  for (const Item& item : items) {
    const int s = static_cast<int>(std::min_element(plan.load.begin(), plan.load.end()) - plan.load.begin());
    if (item.chunk < 0) {
      std::fill(plan.server_of[item.parameter].begin(), plan.server_of[item.parameter].end(), s);
    } else {
      plan.server_of[item.parameter][static_cast<size_t>(item.chunk)] = s;
    }
    plan.load[static_cast<size_t>(s)] += item.elements;
  }
}

// The worker role, then every worker node on it (nodes without inputs
// other than data stay everywhere: constants both sides may read).
absl::Status PlaceWorkers(Graph& graph, ServerPlan& plan) {
  ASSIGN_OR_RETURN(std::vector<GroupDecl> groups, DeclaredGroups(graph));
  groups.push_back(GroupDecl{kWorkerRole, GroupLayout::kRanks, static_cast<int>(plan.workers), 0});
  DeclareGroups(graph, groups);
  plan.on_workers.role = kWorkerRole;
  for (Node* n : graph.nodes()) {
    if (plan.worker_nodes.contains(n) && (n->num_inputs() > 0 || n->op() == "Input" || n->op() == "Parameter")) {
      SetPlacement(*n, plan.on_workers);
    }
  }
  return absl::OkStatus();
}

// Places parameter i and its gradient on the parameter's server, checks its
// chunks fit the channels left, and finds its update (and, split, the state
// the update carries on).
absl::Status StartChain(ServerPlan& plan, size_t i, ParameterChain& chain) {
  chain.index = i;
  chain.p = plan.trained[i].parameter;
  chain.gradient = plan.trained[i].gradient;
  chain.dims = chain.p->outputs()[0].shape.dims();
  chain.n = chain.p->outputs()[0].shape.KnownElements();
  const int server = static_cast<int>(plan.first_server) +
                     (plan.server_of[i].empty() ? 0 : plan.server_of[i][0]);  // the whole parameter's
  chain.on_server.worker = server;
  SetPlacement(*chain.p, chain.on_server);
  SetPlacement(*chain.gradient, chain.on_server);
  chain.base = absl::StrCat("ps/", chain.p->name());
  const std::vector<std::pair<int64_t, int64_t>>& chunks = plan.chunks_of[i];
  chain.split = plan.splits[i];
  plan.split_parameters += chain.split ? 1 : 0;
  plan.chunks_total += static_cast<int64_t>(chunks.size());
  if (plan.channel + plan.channels_per_chunk * static_cast<int64_t>(chunks.size()) > kMaxChannels) {
    return absl::InvalidArgumentError(absl::StrCat("parameter_server: more than ",
                                                   kMaxChannels / plan.channels_per_chunk, " chunks; raise chunk_kb (",
                                                   plan.chunk_kb, ")"));
  }
  // The update, chunk by chunk when it can be (see ChunkableUpdate); else
  // whole, once every chunk's gradient arrived: P's next value, which its
  // Feedback carries into the next step, is cut into chunks to pull.
  chain.update = plan.updates[i];
  if (chain.update != nullptr) ++plan.chunked_updates;
  // Split, each P-shaped state input is kept chunk by chunk on the
  // chunk's server: which update output carries it to the next step.
  if (chain.split) {
    for (const Edge* e : chain.update->out_edges()) {
      if (e->dst->op() == "Feedback" && !e->dst->out_edges().empty()) {
        chain.next_output[e->dst->out_edges()[0]->dst] = e->src_port;
      }
    }
  }
  return absl::OkStatus();
}

// The flattened values a parameter's chunks are sliced from: the update's
// P-shaped inputs (not split) or P's next value (no update) on the server,
// the gradient on the workers.
absl::Status FlattenValues(Graph& graph, const ServerPlan& plan, ParameterChain& chain) {
  Node* update = chain.update;
  chain.flat_inputs.resize(update != nullptr && !chain.split ? static_cast<size_t>(update->num_inputs()) : 0);
  for (size_t i = 0; i < chain.flat_inputs.size(); ++i) {
    const Edge* e = update->input_edge(static_cast<int>(i));
    if (e->src == chain.gradient || e->src->outputs()[static_cast<size_t>(e->src_port)].shape.rank() == 0) continue;
    ASSIGN_OR_RETURN(Node * flat, AddOpNode(&graph, absl::StrCat(update->name(), "/in", i, "/flat"), "Reshape",
                                            {{e->src, e->src_port}}, {{"shape", IntListAttr({chain.n})}}));
    SetPlacement(*flat, chain.on_server);
    chain.flat_inputs[i] = {flat, 0};
  }
  chain.next_in = chain.p->input_edge(0)->src->input_edge(0);  // P's Feedback <- P's next value
  if (update == nullptr) {
    ASSIGN_OR_RETURN(chain.flat_p,
                     AddOpNode(&graph, chain.base + "/flat", "Reshape", {{chain.next_in->src, chain.next_in->src_port}},
                               {{"shape", IntListAttr({chain.n})}}));
    SetPlacement(*chain.flat_p, chain.on_server);
  }
  chain.updated.resize(update != nullptr ? update->outputs().size() : 0);
  const Edge* g_in = chain.gradient->input_edge(0);
  ASSIGN_OR_RETURN(chain.flat_g, AddOpNode(&graph, chain.base + "/grad/flat", "Reshape", {{g_in->src, g_in->src_port}},
                                           {{"shape", IntListAttr({chain.n})}}));
  SetPlacement(*chain.flat_g, plan.on_workers);
  return absl::OkStatus();
}

// The attributes of a chunk's Send to (or Recv from) `peer`: the push on
// the chunk's first channel, the pull on its last. A pull waits on its
// parameter's pushes, which may come on later channels: pulls go in the
// second phase of the ranks' issue order (ops/collective_schedule.h).
std::vector<std::pair<std::string, AttrValue>> EndAttrs(const ServerPlan& plan, const ChunkSite& chunk, int64_t peer,
                                                        bool pull = false) {
  std::vector<std::pair<std::string, AttrValue>> attrs = {
      {"peer", IntAttr(peer)},
      {"channel", IntAttr(chunk.channel + (pull ? plan.channels_per_chunk - 1 : 0))},
      {"eval", BoolAttr(false)}};
  if (pull) attrs.emplace_back("phase", IntAttr(1));
  return attrs;
}

// A chunk's Recv from `peer`: its end's attributes and the chunk's shape.
std::vector<std::pair<std::string, AttrValue>> ReceivedAttrs(const ServerPlan& plan, const ChunkSite& chunk,
                                                             int64_t peer, bool pull = false) {
  std::vector<std::pair<std::string, AttrValue>> attrs = EndAttrs(plan, chunk, peer, pull);
  attrs.emplace_back("shape", ShapeAttr({chunk.size}));
  return attrs;
}

// Push: every worker sends its gradient's chunk to the chunk's server, which
// sums what arrived and scales it by 1/workers; returns that mean.
absl::StatusOr<Node*> AddPush(Graph& graph, const ServerPlan& plan, ParameterChain& chain, const ChunkSite& chunk) {
  ASSIGN_OR_RETURN(Node * grad, AddOpNode(&graph, chunk.name + "/grad", "Slice", {{chain.flat_g, 0}}, chunk.slice));
  SetPlacement(*grad, plan.on_workers);
  ASSIGN_OR_RETURN(Node * push,
                   AddOpNode(&graph, chunk.name + "/push", "Send", {{grad, 0}}, EndAttrs(plan, chunk, chunk.server)));
  SetPlacement(*push, plan.on_workers);
  // A parameter's chunks leave for each server in order, each once the
  // one before is handed over: started all at once, their threads
  // raced to the socket, every worker's chunks reached the server in
  // another order, and a chunk's pull waited for the worker that sent
  // it last. Per server, so that a busy server's link does not hold
  // back the chunks for another (split=true).
  Node*& previous = chain.previous_push[chunk.server];
  if (previous != nullptr) graph.AddControlEdge(previous, push);
  previous = push;
  std::vector<NodeOut> arrived;
  for (int64_t w = 0; w < plan.workers; ++w) {
    ASSIGN_OR_RETURN(Node * in, AddOpNode(&graph, absl::StrCat(chunk.name, "/push/from", w), "Recv", {},
                                          ReceivedAttrs(plan, chunk, w)));
    SetPlacement(*in, chunk.on_server);
    arrived.push_back({in, 0});
  }
  NodeOut sum = arrived[0];
  if (arrived.size() > 1) {
    ASSIGN_OR_RETURN(Node * added, AddOpNode(&graph, chunk.name + "/sum", "AddN", arrived));
    SetPlacement(*added, chunk.on_server);
    sum = {added, 0};
  }
  ASSIGN_OR_RETURN(Node * averaged, AddOpNode(&graph, chunk.name + "/mean", "Mul", {sum, {plan.mean, 0}}));
  SetPlacement(*averaged, chunk.on_server);
  return averaged;
}

// The chunk's gradient (the marker later passes look for), reading the mean
// `averaged`, and its update on the chunk's server: P-shaped inputs sliced
// (split: the chunk's own piece of the state), scalars shared.
absl::StatusOr<Node*> AddChunkUpdate(Graph& graph, const ParameterChain& chain, const ChunkSite& chunk,
                                     Node* averaged) {
  Node* update = chain.update;
  NodeDef marker = chain.gradient->def();
  marker.set_name(chunk.name + "/gradient");
  marker.clear_input();
  ASSIGN_OR_RETURN(Node * chunk_gradient, graph.AddNode(marker, 1));
  RETURN_IF_ERROR(graph.AddEdge(averaged, 0, chunk_gradient, 0).status());
  SetPlacement(*chunk_gradient, chunk.on_server);
  NodeDef def = update->def();
  def.set_name(absl::StrCat(update->name(), "/chunk", chunk.k));
  def.clear_input();
  ASSIGN_OR_RETURN(Node * chunk_update, graph.AddNode(def, update->num_inputs()));
  SetPlacement(*chunk_update, chunk.on_server);
  for (int i = 0; i < update->num_inputs(); ++i) {
    const Edge* e = update->input_edge(i);
    NodeOut in{e->src, e->src_port};
    if (e->src == chain.gradient) {
      in = {chunk_gradient, 0};
    } else if (chain.split && e->src->outputs()[static_cast<size_t>(e->src_port)].shape.rank() != 0) {
      // This chunk's piece of the state, kept on the chunk's server.
      ASSIGN_OR_RETURN(Node * piece, AddStatePiece(graph, *e->src, absl::StrCat(e->src->name(), "/chunk", chunk.k),
                                                   chunk.begin, chunk.size));
      SetPlacement(*piece, chunk.on_server);
      if (e->src == chain.p) {
        // The chunk's gradient is the gradient of this piece: P is gone.
        (*chunk_gradient->mutable_def()->mutable_attr())["parameter"] = StringAttr(piece->name());
      }
      if (auto q = chain.next_output.find(e->src); q != chain.next_output.end()) {
        RETURN_IF_ERROR(CloseLoop(graph, piece, {chunk_update, q->second}));
      }
      in = {piece, 0};
    } else if (!chain.split && chain.flat_inputs[static_cast<size_t>(i)].node != nullptr) {
      ASSIGN_OR_RETURN(Node * piece, AddOpNode(&graph, absl::StrCat(chunk_update->name(), "/in", i), "Slice",
                                               {chain.flat_inputs[static_cast<size_t>(i)]}, chunk.slice));
      SetPlacement(*piece, chunk.on_server);
      in = {piece, 0};
    }
    RETURN_IF_ERROR(graph.AddEdge(in.node, in.port, chunk_update, i).status());
  }
  return chunk_update;
}

// Chunk k of a parameter: its push and mean on its server, its next value
// there (its own update, or a slice of P's), and its pull to every worker.
absl::Status AddChunk(Graph& graph, const ServerPlan& plan, ParameterChain& chain, size_t k) {
  ChunkSite chunk;
  chunk.k = k;
  chunk.begin = plan.chunks_of[chain.index][k].first;
  chunk.size = plan.chunks_of[chain.index][k].second;
  chunk.name = absl::StrCat(chain.base, "/chunk", k);
  chunk.server = static_cast<int>(plan.first_server) + plan.server_of[chain.index][k];
  chunk.on_server.worker = chunk.server;
  chunk.channel = plan.channel;
  chunk.slice = {{"begin", IntAttr(chunk.begin)}, {"size", IntAttr(chunk.size)}};
  ASSIGN_OR_RETURN(Node * averaged, AddPush(graph, plan, chain, chunk));
  chain.pushed.push_back({averaged, 0});
  NodeOut value;  // the chunk's next value
  if (chain.update != nullptr) {
    ASSIGN_OR_RETURN(Node * chunk_update, AddChunkUpdate(graph, chain, chunk, averaged));
    for (size_t q = 0; q < chain.updated.size(); ++q) chain.updated[q].push_back({chunk_update, static_cast<int>(q)});
    value = {chunk_update, chain.next_in->src_port};
  } else {
    ASSIGN_OR_RETURN(Node * piece, AddOpNode(&graph, chunk.name + "/value", "Slice", {{chain.flat_p, 0}}, chunk.slice));
    SetPlacement(*piece, chunk.on_server);
    value = {piece, 0};
  }
  // Pull: the server sends the updated chunk to every worker.
  for (int64_t w = 0; w < plan.workers; ++w) {
    ASSIGN_OR_RETURN(Node * send, AddOpNode(&graph, absl::StrCat(chunk.name, "/pull/to", w), "Send", {value},
                                            EndAttrs(plan, chunk, w, /*pull=*/true)));
    SetPlacement(*send, chunk.on_server);
  }
  ASSIGN_OR_RETURN(Node * recv, AddOpNode(&graph, chunk.name + "/pull", "Recv", {},
                                          ReceivedAttrs(plan, chunk, chunk.server, /*pull=*/true)));
  SetPlacement(*recv, plan.on_workers);
  chain.pulled.push_back({recv, 0});
  return absl::OkStatus();
}

// Chunks joined into one value of shape `dims` at `at`: concatenated (when
// more than one), then reshaped.
absl::StatusOr<Node*> JoinChunks(Graph& graph, const std::string& name, const std::vector<NodeOut>& parts,
                                 const std::vector<int64_t>& dims, const Placement& at) {
  NodeOut whole = parts[0];
  if (parts.size() > 1) {
    ASSIGN_OR_RETURN(Node * cat, AddOpNode(&graph, name + "/concat", "Concat", parts, {{"axis", IntAttr(0)}}));
    SetPlacement(*cat, at);
    whole = {cat, 0};
  }
  ASSIGN_OR_RETURN(Node * shaped, AddOpNode(&graph, name, "Reshape", {whole}, {{"shape", IntListAttr(dims)}}));
  SetPlacement(*shaped, at);
  return shaped;
}

// The server's side once every chunk is built: the chunks replace the
// update (split: with the whole parameter's state), or their mean feeds
// P's gradient when the update runs whole.
absl::Status JoinOnServer(Graph& graph, const ParameterChain& chain) {
  Node* update = chain.update;
  Node* gradient = chain.gradient;
  if (chain.split) {
    // The whole parameter and its state are gone: their chunks replace them.
    std::vector<Node*> states;
    for (int q = 0; q < update->num_inputs(); ++q) {
      Node* in = update->input_edge(q)->src;
      if (in != gradient && in->op() == "Parameter" && in->outputs()[0].shape.rank() != 0) states.push_back(in);
    }
    graph.RemoveNode(update);
    graph.RemoveNode(gradient);
    for (Node* state : states) {
      if (state != chain.p) RETURN_IF_ERROR(RemoveState(graph, state));
    }
  } else if (update != nullptr) {
    // The chunks' next values (P's, its state's) joined for the Feedbacks.
    for (size_t q = 0; q < chain.updated.size(); ++q) {
      const auto& outs = update->out_edges();
      if (std::none_of(outs.begin(), outs.end(), [&](const Edge* e) { return e->src_port == static_cast<int>(q); })) {
        continue;  // an output no one reads (ApplySgd's velocity without momentum)
      }
      ASSIGN_OR_RETURN(Node * whole, JoinChunks(graph, absl::StrCat(update->name(), "/out", q), chain.updated[q],
                                                chain.dims, chain.on_server));
      RETURN_IF_ERROR(graph.RedirectOutput(update, static_cast<int>(q), whole, 0));
    }
    graph.RemoveNode(update);
    graph.RemoveNode(gradient);
  } else {
    ASSIGN_OR_RETURN(Node * mean_gradient,
                     JoinChunks(graph, chain.base + "/grad/mean", chain.pushed, chain.dims, chain.on_server));
    RETURN_IF_ERROR(graph.ReplaceInput(gradient, 0, mean_gradient, 0));
  }
  return absl::OkStatus();
}

// The workers' side: their copy of P, which the pulled chunks joined carry
// into the next step, read in place of P (split: P itself is gone).
absl::Status AddWorkerCopy(Graph& graph, const ServerPlan& plan, const ParameterChain& chain) {
  Node* p = chain.p;
  ASSIGN_OR_RETURN(Node * next_copy,
                   JoinChunks(graph, chain.base + "/pulled", chain.pulled, chain.dims, plan.on_workers));
  NodeDef copy_def = p->def();
  copy_def.set_name(chain.base + "/copy");
  copy_def.clear_input();
  (*copy_def.mutable_attr())["trainable"] = BoolAttr(false);
  ASSIGN_OR_RETURN(Node * copy, graph.AddNode(copy_def, 0));
  SetPlacement(*copy, plan.on_workers);
  RETURN_IF_ERROR(CloseLoop(graph, copy, {next_copy, 0}));
  std::vector<std::pair<Node*, int>> readers;
  for (const Edge* e : p->out_edges()) {
    if (!e->IsControl() && plan.worker_nodes.contains(e->dst)) readers.emplace_back(e->dst, e->dst_port);
  }
  for (auto& [reader, port] : readers) RETURN_IF_ERROR(graph.ReplaceInput(reader, port, copy, 0));
  if (chain.split) RETURN_IF_ERROR(RemoveState(graph, p));
  return absl::OkStatus();
}

// Trained parameter i's whole chain: push, aggregate, update and pull, chunk
// by chunk, then the joins on the server and the workers.
absl::Status ServeParameter(Graph& graph, ServerPlan& plan, size_t i) {
  ParameterChain chain;
  RETURN_IF_ERROR(StartChain(plan, i, chain));
  RETURN_IF_ERROR(FlattenValues(graph, plan, chain));
  for (size_t k = 0; k < plan.chunks_of[i].size(); ++k, plan.channel += plan.channels_per_chunk) {
    RETURN_IF_ERROR(AddChunk(graph, plan, chain, k));
  }
  // The server's mean gradient; the worker's copy of P and its next value.
  RETURN_IF_ERROR(JoinOnServer(graph, chain));
  return AddWorkerCopy(graph, plan, chain);
}

// Stale-synchronous, with a fixed delay: the servers apply each step's
// mean gradient `staleness` steps late (the delay line of
// passes/gradient_delay.h, on their chunk gradients). The pull of step t
// then needs every worker's push of step t - staleness only, so a worker
// computes step u once every worker has pushed step u - 1 - staleness:
// it runs at most `staleness` steps ahead of the slowest, and keeps
// staleness + 1 steps in flight (the progress tracker's frontier bound).
// Ho et al.'s SSP reads fresher values when they happen to be there;
// this one always reads the same ones, so runs stay reproducible.
absl::Status DelayForSsp(Graph& graph, const ServerPlan& plan, PassLog* log) {
  const int64_t staleness = plan.staleness;
  if (staleness <= 0) return absl::OkStatus();
  RETURN_IF_ERROR(ValidateAndInferShapes(graph));  // the chunks' shapes, for their delay states
  ASSIGN_OR_RETURN(DelayedGradients delayed, DelayGradients(graph, staleness + 1, "parameter_server"));
  log->notes.push_back(absl::StrCat("mode=ssp: updates apply gradients ", staleness, " step", staleness == 1 ? "" : "s",
                                    " old (", delayed.state_bytes, " bytes of delay state on the servers); ",
                                    staleness + 1, " steps in flight"));
  return absl::OkStatus();
}

// The plan's parameter-server record.
void RecordServers(Graph& graph, const ServerPlan& plan) {
  PlanRecords& records = *graph.mutable_header()->mutable_records();
  records.mutable_parameter_server()->set_colocated(plan.colocated);  // no rank is a server only
  records.mutable_parameter_server()->set_servers(plan.colocated ? 0 : static_cast<int32_t>(plan.servers));
  records.set_data_replicas(static_cast<int32_t>(plan.workers));
}

// The record, and the note on how the parameters and their chunks spread
// over the servers.
void WriteRecords(Graph& graph, const ServerPlan& plan, PassLog* log) {
  RecordServers(graph, plan);
  std::string balance;
  for (int64_t s = 0; s < plan.servers; ++s) {
    absl::StrAppend(&balance, s ? ", " : "", "rank ", plan.first_server + s, ": ",
                    plan.load[static_cast<size_t>(s)] * 4 / 1024, " KiB");
  }
  log->notes.push_back(
      absl::StrCat(plan.trained.size(), " parameters on ", plan.servers, " servers (", balance, ") for ", plan.workers,
                   " workers, ", plan.chunks_total, " chunks of at most ", plan.chunk_kb, " KiB; ",
                   plan.chunked_updates, " of ", plan.trained.size(), " updated chunk by chunk",
                   plan.split ? absl::StrCat(", ", plan.split_parameters, " split over the servers") : ""));
}

// Colocated servers whose pushes and pulls go through collectives
// (passes/colocated_shards.h) when `exchange` asks for it or, with
// exchange=auto, when every update can run on a shard: elementwise, on
// state only it reads, synchronous. Returns whether the plan was rewritten.
absl::StatusOr<bool> ExchangeByCollectives(Graph& graph, const PassContext& context, const ServerPlan& plan,
                                           PassLog* log) {
  if (!plan.colocated || plan.exchange == "p2p") return false;
  // Why the shards cannot take the updates, if they cannot.
  std::string refused;
  std::vector<ShardableParameter> parameters;
  if (plan.staleness > 0) refused = "mode=ssp delays the updates";
  for (size_t i = 0; i < plan.trained.size() && refused.empty(); ++i) {
    const GradientOfParameter& t = plan.trained[i];
    if (plan.updates[i] == nullptr) {
      refused = absl::StrCat("the update of '", t.parameter->name(), "' is not elementwise");
    } else if (!StateInputsOnly(*t.parameter, *plan.updates[i], *t.gradient, plan.worker_nodes)) {
      refused = absl::StrCat("the update of '", t.parameter->name(), "' reads values other than its own state");
    }
    parameters.push_back({t.parameter, t.gradient, plan.updates[i]});
  }
  if (!refused.empty()) {
    if (plan.exchange == "collective") {
      return absl::FailedPreconditionError(absl::StrCat("parameter_server: exchange=collective: ", refused));
    }
    log->notes.push_back(absl::StrCat("exchange=auto: point to point, since ", refused));
    return false;
  }
  const double asked_kb = context.options.GetFloat("chunk_kb");
  const int64_t bucket_bytes = static_cast<int64_t>((asked_kb > 0 ? asked_kb : kDefaultBucketKb) * 1024);
  ASSIGN_OR_RETURN(std::string note,
                   ShardOverColocatedServers(graph, parameters, static_cast<int>(plan.workers), bucket_bytes));
  log->notes.push_back(std::move(note));
  RecordServers(graph, plan);
  return true;
}

class ParameterServerPass : public Pass {
 public:
  absl::Status Run(Graph& graph, const PassContext& context, PassLog* log) override {
    ServerPlan plan;
    RETURN_IF_ERROR(ReadOptions(context, plan));
    for (const Node* n : graph.nodes()) {
      if (!PlacementOf(*n).everywhere()) return absl::FailedPreconditionError("parameter_server: the model is placed already");
    }
    ASSIGN_OR_RETURN(plan.trained, FindGradientsUpdated(graph));
    plan.worker_nodes = WorkerNodes(graph, plan.trained);
    ChunkParameters(plan);
    ASSIGN_OR_RETURN(bool sharded, ExchangeByCollectives(graph, context, plan, log));
    if (sharded) return absl::OkStatus();
    AssignServers(plan);
    RETURN_IF_ERROR(PlaceWorkers(graph, plan));
    const AttrValue scale = ScalarConstValue(1.0f / static_cast<float>(plan.workers));
    ASSIGN_OR_RETURN(plan.mean, AddOpNode(&graph, "ps/mean_scale", "Const", {}, {{"value", scale}}));
    for (size_t i = 0; i < plan.trained.size(); ++i) RETURN_IF_ERROR(ServeParameter(graph, plan, i));
    RETURN_IF_ERROR(DelayForSsp(graph, plan, log));
    WriteRecords(graph, plan, log);
    return absl::OkStatus();
  }

 private:
  // Each trained parameter with its Gradient node, after an optimizer.
  static absl::StatusOr<std::vector<GradientOfParameter>> FindGradientsUpdated(Graph& graph) {
    std::vector<GradientOfParameter> trained;
    for (Node* n : graph.nodes()) {
      if (n->op() != "Gradient") continue;
      Node* p = graph.FindNode(NodeAttrString(*n, "parameter"));
      if (p == nullptr || p->num_inputs() != 1) {
        return absl::FailedPreconditionError("parameter_server: runs after an optimizer (sgd, adam)");
      }
      trained.push_back({p, n});
    }
    if (trained.empty()) return absl::FailedPreconditionError("parameter_server: runs after autodiff and an optimizer");
    return trained;
  }
};

PassInfo ParameterServerInfo() {
  PassInfo info{"parameter_server",
                "Synchronous parameter servers: the last `servers` ranks hold the parameters, their optimizer state "
                "and updates; workers pull parameters and push gradients in chunks, which the servers average.",
                {{"servers", OptionType::kInt, "1", "how many of the plan's ranks are servers (the last ones)"},
                 {"chunk_kb", OptionType::kFloat, "0",
                  "the largest message, in KiB: values move in chunks (0: 256, or larger where the model needs "
                  "more than 1024 chunks; 32 suits links of ~50 Mbit/s)"},
                 {"mode", OptionType::kString, "sync",
                  "sync: every step's mean gradient applied at once; ssp: stale-synchronous, applied `staleness` "
                  "steps late, so workers run up to `staleness` steps apart"},
                 {"staleness", OptionType::kInt, "1", "with mode=ssp: how many steps a worker may run ahead (0: sync)"},
                 {"split", OptionType::kBool, "false",
                  "balance chunks, not whole parameters, over the servers: a parameter's chunks, with their "
                  "optimizer state, may live on different servers"},
                 {"colocated", OptionType::kBool, "false",
                  "every rank a worker and a server of 1/world of the parameters (servers is then ignored)"},
                 {"exchange", OptionType::kString, "auto",
                  "colocated servers' pushes and pulls: collective (a reduce-scatter and an all-gather per bucket "
                  "of chunk_kb, default 4096, every parameter sharded over the ranks), p2p (a message per chunk "
                  "and peer), auto (collective where every update runs element by element, synchronously)"}},
                [] { return std::make_unique<ParameterServerPass>(); }};
  info.needs = {kOptimizerProperty};
  info.provides = {kGradientCommunicationProperty};
  info.precedes = {kPipelinedProperty};  // mode=ssp is the pipelined shape itself
  return info;
}

NEREID_REGISTER_PASS(ParameterServerInfo());

}  // namespace
}  // namespace nereid
