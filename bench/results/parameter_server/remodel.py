"""The model column of a finished bench/parameter_server.py run, again, with the nereid built now:
    python3 bench/results/parameter_server/remodel.py [--slow-ms N] OUT MODEL SERVER_RATE OPTIMIZER \
        ROW:SERVERS:CHUNK_KB:STALENESS:SPLIT ...
(from the repository root; reads the profiles, link.json and, where the run measured it,
server_link.json from OUT/raw/, where the bench keeps them, or from OUT itself for runs made
before it did; writes OUT/raw/final_model/). --slow-ms: the run's straggler (its --slow-ms).
Used on 2026-11-27 after the chunk schedule stopped charging a server's link for a worker's, and
again after the chunks became a stream per server and the straggler joined the model
(docs/PARAMETER_SERVER.md)."""
import argparse
import glob
import importlib.util
import os

spec = importlib.util.spec_from_file_location("ps", "bench/parameter_server.py")
ps = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ps)
ap = argparse.ArgumentParser()
ap.add_argument("--slow-ms", type=int, default=0)
ap.add_argument("out")
ap.add_argument("model")
ap.add_argument("server_rate")
ap.add_argument("optimizer")
ap.add_argument("rows", nargs="+")
given = ap.parse_args()
out, model = given.out, given.model
args = argparse.Namespace(model=model, workers=4, batch=32, model_latency_us=200, rate="45mbit",
                          server_rate=given.server_rate, optimizer=given.optimizer, slow_ms=given.slow_ms)
if os.path.isdir(os.path.join(out, "raw")):
    out = os.path.join(out, "raw")
os.makedirs(os.path.join(out, "final_model"), exist_ok=True)
traces = ",".join(sorted(glob.glob(os.path.join(out, f"profile_{model}_*.json"))))
link = os.path.join(out, "link.json")
server_link = os.path.join(out, "server_link.json")
server_link = server_link if os.path.exists(server_link) else None  # else the nominal --server-rate
for spec_ in given.rows:
    row, servers, chunk, st, split = spec_.split(":")
    r = ps.predict(args, traces, link, server_link, int(servers), float(chunk), int(st),
                   os.path.join(out, "final_model"), split == "1")
    print(spec_, round(r[row], 3))
