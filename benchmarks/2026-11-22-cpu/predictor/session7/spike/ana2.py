import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
t0 = rows[0]["t"]; lo, hi = float(sys.argv[2]), float(sys.argv[3])
sel = [r for r in rows if lo <= r["t"] - t0 <= hi]
a, b = sel[0], sel[-1]; dt = b["t"] - a["t"]
byproc = collections.Counter(); bythread = collections.Counter(); wait = collections.Counter()
for k, v in b["th"].items():
    if k not in a["th"]: continue
    run = (v[3] - a["th"][k][3]) / 1e9 / dt; wt = (v[4] - a["th"][k][4]) / 1e9 / dt
    pname = "worker" if "RayTrainWorker" in v[0] or "RayTrainWorker" in v[5] else v[0]
    byproc[pname] += run
    if pname == "worker": bythread[v[1]] += run; wait[v[1]] += wt
st = [y - x for x, y in zip(a["stat"], b["stat"])]; tot = sum(st[:8])
print(f"window {dt:.1f}s; stat user {st[0]/tot:.2f} sys {st[2]/tot:.2f} idle {st[3]/tot:.2f} softirq {st[6]/tot:.2f} steal {st[7]/tot:.2f}")
print("cores by process:", ", ".join(f"{n}:{c:.3f}" for n, c in byproc.most_common(14)))
print("worker threads (run, runqueue wait), summed over 4 workers:", ", ".join(f"{n}:{c:.3f}/{wait[n]:.2f}" for n, c in bythread.most_common(12)))
