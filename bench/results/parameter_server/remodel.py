"""The model column of a finished bench/parameter_server.py run, again, with the nereid built now:
    python3 bench/results/parameter_server/remodel.py OUT MODEL SERVER_RATE OPTIMIZER ROW:SERVERS:CHUNK_KB:STALENESS:SPLIT ...
(from the repository root; reads OUT's profiles and link.json, writes OUT/final_model/). Used on 2026-11-27
after the chunk schedule stopped charging a server's link for a worker's (docs/PARAMETER_SERVER.md)."""
import importlib.util, sys, os, glob, argparse, json
spec = importlib.util.spec_from_file_location("ps", "bench/parameter_server.py"); ps = importlib.util.module_from_spec(spec); spec.loader.exec_module(ps)
out, model, server_rate, opt = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
args = argparse.Namespace(model=model, workers=4, batch=32, model_latency_us=200, rate="45mbit", server_rate=server_rate, optimizer=opt)
os.makedirs(os.path.join(out, "final_model"), exist_ok=True)
traces = ",".join(sorted(glob.glob(os.path.join(out, f"profile_{model}_*.json"))))
link = os.path.join(out, "link.json")
for spec_ in sys.argv[5:]:
    row, servers, chunk, st, split = spec_.split(":")
    r = ps.predict(args, traces, link, None, int(servers), float(chunk), int(st), os.path.join(out, "final_model"), split == "1")
    print(spec_, round(r[row], 3))
