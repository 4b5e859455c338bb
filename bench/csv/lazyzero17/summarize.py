import glob,re,statistics as st,collections
d=collections.defaultdict(list)
for f in sorted(glob.glob('host-r*-*.txt')):
    mode=f.split('-')[-1][:-4]
    for l in open(f):
        m=re.match(r'swa\s+(\w+) (swa|full) (cache_finished_req|evict \(frees included\)|first alloc_extend after a finish)\s+(\d+)\s+(\d+)\s+([\d.]+)',l)
        if m:
            tr,who,op,ps,cap,med=m.groups(); op=op.split()[0]
            d[(tr,int(ps),int(cap),who,op,mode)].append(float(med))
        m=re.match(r'ratio\s+(\w+)\s+p(\d+)\s+(\d+) swa/full: match ([\d.]+) insert ([\d.]+) finished ([\d.]+) evict ([\d.]+)',l)
        if m:
            tr,ps,cap=m.group(1),int(m.group(2)),int(m.group(3))
            d[(tr,ps,cap,'ratio','finished',mode)].append(float(m.group(6)))
            d[(tr,ps,cap,'ratio','evict',mode)].append(float(m.group(7)))
def r(v): return "%.2f-%.2f (%.2f)"%(min(v),max(v),st.median(v)) if v else "-"
print("| trace | page | tree | SWA finished us, lazy | eager | SWA evict us, lazy | eager | finished SWA/full, lazy | eager | evict SWA/full, lazy | eager | first alloc_extend us, SWA lazy | SWA eager | full |")
print("|"+"---|"*14)
keys=sorted(set(k[:3] for k in d))
for k in keys:
    g=lambda who,op,mode: d.get(k+(who,op,mode),[])
    print("| %s | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"%(k[0],k[1],k[2],
      r(g('swa','cache_finished_req','lazy')),r(g('swa','cache_finished_req','eager')),
      r(g('swa','evict','lazy')),r(g('swa','evict','eager')),
      r(g('ratio','finished','lazy')),r(g('ratio','finished','eager')),
      r(g('ratio','evict','lazy')),r(g('ratio','evict','eager')),
      r(g('swa','first','lazy')),r(g('swa','first','eager')),r(g('full','first','lazy')+g('full','first','eager'))))
