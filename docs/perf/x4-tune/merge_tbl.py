"""Merge ccl-tune tables into a built-in one: header from the first tuned table, rows of
the base with every (collective, bucket) a tuned table measured replaced by its row."""
import sys
base, out, tuned = sys.argv[1], sys.argv[2], sys.argv[3:]
rows, header, order = {}, None, []
def nbytes(t):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    return int(t[:-1]) * m[t[-1]] if t[-1] in m else int(t)
def parse(path):
    hdr, rr = [], []
    for line in open(path):
        s = line.split()
        if s and not line.startswith("#") and s[0] in ("allreduce","allgather","reduce_scatter","alltoall","broadcast","reduce"):
            rr.append(((s[0], nbytes(s[1])), line))
        elif not rr:
            hdr.append(line)
    return hdr, rr
_, brows = parse(base)
for k, l in brows: rows[k] = l; order.append(k)
for t in tuned:
    try: h, tr = parse(t)
    except OSError: continue
    header = header or h
    for k, l in tr:
        if k not in rows: order.append(k)
        rows[k] = l
with open(out, "w") as f:
    f.writelines(header or parse(base)[0])
    for k in order: f.write(rows[k])
