import os, sys, time, json
out = open(sys.argv[1], "w"); period = float(sys.argv[2])
def snap():
    th = {}
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            pc = open(f"/proc/{p}/comm").read().strip()
            cmd = open(f"/proc/{p}/cmdline").read(200).replace("\0", " ")[:80]
            for t in os.listdir(f"/proc/{p}/task"):
                s = open(f"/proc/{p}/task/{t}/stat").read()
                name = s[s.index("(")+1:s.rindex(")")]; f = s[s.rindex(")")+2:].split()
                ss = open(f"/proc/{p}/task/{t}/schedstat").read().split()
                th[f"{p}/{t}"] = [pc, name, int(f[11]) + int(f[12]), int(ss[0]), int(ss[1]), cmd]
        except (OSError, ValueError): pass
    return th
while True:
    st = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    out.write(json.dumps({"t": time.time(), "stat": st, "th": snap()}) + "\n"); out.flush()
    time.sleep(period)
