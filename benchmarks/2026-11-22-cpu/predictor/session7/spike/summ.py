import json, glob, collections
tags = sorted({f.rsplit(".r",1)[0] for f in glob.glob("out/*.r0.json")})
for t in tags:
    rs = [json.load(open(f)) for f in sorted(glob.glob(t + ".r*.json"))]
    f = rs[0]["final"]
    steps = 40
    wall = max(r["wall"] for r in rs)
    cpu = sum(r["user"] + r["sys"] for r in rs)
    ps = rs[0]["proc_stat"]; tot = sum(ps[:8])
    # user nice system idle iowait irq softirq steal
    share = lambda i: ps[i] / tot
    thr = collections.Counter()
    for r in rs:
        for tid, (name, ticks) in r["threads"].items():
            thr[name] += ticks / 100
    top = ", ".join(f"{n}:{v:.1f}" for n, v in thr.most_common(5))
    print(f"{t.split('/')[-1]:16} step {f['step_time_s']*1e3:6.1f} comp {f['compute_s']*1e3:6.1f} enc {f['encode_s']*1e3:5.1f} comm {f['comm_s']*1e3:6.1f} dec {f['decode_s']*1e3:5.1f} exp {f.get('exposed_comm_s',0)*1e3:6.1f} | wall {wall:5.1f} cpu {cpu:5.1f}s = {cpu/wall:4.2f} cores; usr {share(0):.2f} sys {share(2):.2f} idle {share(3):.2f} sirq {share(6):.2f} steal {share(7):.2f}; vcsw {sum(r['vcsw'] for r in rs)} ivcsw {sum(r['ivcsw'] for r in rs)} | {top}")
