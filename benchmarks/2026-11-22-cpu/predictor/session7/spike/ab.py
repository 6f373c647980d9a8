"""Spike: one rank of a hand-run world (no Ray): final phases, CPU time per thread, machine CPU."""
import json, os, sys, time, resource
from orchestrator import train_loop, env_info
hooks = []
orig = train_loop._comm_hook
def capture(*a, **k):
    h = orig(*a, **k); hooks.append(h); return h
train_loop._comm_hook = capture
comp, algo, overlap, steps, out = sys.argv[1], sys.argv[2], sys.argv[3] == "on", int(sys.argv[4]), sys.argv[5]
params = {"bits": 4} if comp == "qsgd" else {}
config = dict(dataset="mnist", model="mlp", width=1024, depth=3, epochs=int(os.environ.get("EPOCHS", "1")), max_steps_per_epoch=steps,
              batch_size=64, optimizer="sgd", lr=0.05, target_accuracy=0.5, overlap=overlap,
              compressor=comp, compressor_params=params, algorithm=algo, seed=0)
def threads():
    d = {}
    for t in os.listdir("/proc/self/task"):
        try:
            s = open(f"/proc/self/task/{t}/stat").read(); name = s[s.index("(")+1:s.rindex(")")]
            f = s[s.rindex(")")+2:].split(); d[t] = (name, int(f[11]) + int(f[12]))
        except OSError: pass
    return d
def cpu(): return [int(x) for x in open("/proc/stat").readline().split()[1:]]
t0, c0, w0, r0 = env_info.cpu_ticks(), cpu(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
res = train_loop.train(config, threads=int(os.environ.get("THREADS", "1")))
t1, c1, w1, r1 = env_info.cpu_ticks(), cpu(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
th = threads()
rows = []
if hooks and hasattr(hooks[0], "history"):
    rows = [{"encode": s.encode_s, "comm": s.comm_s, "decode": s.decode_s} for s in hooks[0].history]
json.dump({"rank": int(os.environ.get("RANK", 0)), "steps": rows, "final": res["final"], "wall": w1 - w0,
           "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime, "vcsw": r1.ru_nvcsw - r0.ru_nvcsw,
           "ivcsw": r1.ru_nivcsw - r0.ru_nivcsw, "threads": th, "proc_stat": [b - a for a, b in zip(c0, c1)],
           "steal": env_info.steal_share(t0, t1)}, open(out, "w"), default=str)
