import re,sys,glob,statistics as S,os
d=sys.argv[1]
# ratio rows per (trace,page,tree) -> who -> list over rounds
R={}; E={}
for f in sorted(glob.glob(d+'/swa-*.txt')):
    who=os.path.basename(f).split('-')[1]
    for l in open(f):
        m=re.match(r'ratio\s+(\S+)\s+p(\d+)\s+(\d+) swa/full: match ([\d.]+) insert ([\d.]+) finished ([\d.]+) evict ([\d.]+); evict per token ([\d.]+)',l)
        if m:
            k=(m.group(1),int(m.group(2)),int(m.group(3)))
            R.setdefault(k,{}).setdefault(who,[]).append([float(x) for x in m.groups()[3:]])
        m=re.match(r'swa\s+(\S+) (swa|full) evict \(frees included\)\s+(\d+)\s+(\d+)\s+([\d.]+)',l)
        if m:
            k=(m.group(1),int(m.group(3)),int(m.group(4)))
            E.setdefault(k,{}).setdefault(who+'-'+m.group(2),[]).append(float(m.group(5)))
def rng(v): return '%.2f-%.2f'%(min(v),max(v))
print('| trace | page | tree | SWA evict us, before | after | full evict us (both builds) | SWA/full per call, before | after | per evicted token, before | after | after: match / insert / finished |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for k in sorted(R, key=lambda k:(k[0]!='sysprompt',k[1],k[2])):
    b=R[k].get('before',[]); a=R[k].get('after',[])
    e=E.get(k,{})
    fb=e.get('before-full',[])+e.get('after-full',[])
    ins=[x[1] for x in a if x[1]>0]
    print('| %s | %d | 10^%d | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s |'%(k[0],k[1],len(str(k[2]))-1,
      rng(e.get('before-swa',[0])),rng(e.get('after-swa',[0])),rng(fb),
      rng([x[3] for x in b]),rng([x[3] for x in a]),rng([x[4] for x in b]),rng([x[4] for x in a]),
      rng([x[0] for x in a]), rng(ins) if ins else '-', rng([x[2] for x in a])))
# Mamba
M={}
for f in sorted(glob.glob(d+'/hybrid-*.txt')):
    who=os.path.basename(f).split('-')[1]
    for l in open(f):
        m=re.match(r'hybrid\s+(.*?): Mamba \(x([\d.]+)\)\s+(\d+)\s+(\d+)',l)
        if m:
            op=re.sub(r' \d+ \(.*','',m.group(1)).strip()
            M.setdefault((op,int(m.group(4))),{}).setdefault(who,[]).append(float(m.group(2)))
        m=re.match(r'hybrid\s+match_req \+ state copy (\d+) B \(([\d.]+) GB/s\)',l)
        if m: M.setdefault(('state copy GB/s',0),{}).setdefault(who,[]).append(float(m.group(2)))
print()
print('| operation (page 16) | tree | Mamba / full, before | after |')
print('|---|---|---|---|')
for k in M:
    print('| %s | %s | %s | %s |'%(k[0], '10^%d'%(len(str(k[1]))-1) if k[1] else '512 states', rng(M[k].get('before',[0])), rng(M[k].get('after',[0]))))
