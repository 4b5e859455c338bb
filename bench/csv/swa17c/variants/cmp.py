import glob,re,sys,os
d=sys.argv[1]; builds=sys.argv[2:]
R={}
for p in sorted(glob.glob(d+'/swa-*.txt')):
    who=os.path.basename(p).split('-')[1]
    for l in open(p):
        m=re.match(r'ratio\s+(\S+)\s+p(\d+)\s+(\d+) swa/full: match ([\d.]+) insert ([\d.]+) finished ([\d.]+) evict ([\d.]+); evict per token ([\d.]+)',l)
        if m:
            R.setdefault((m.group(1),int(m.group(2)),int(m.group(3))),{}).setdefault(who,[]).append([float(x) for x in m.groups()[3:]])
def sp(v):
    v=[x for x in v if x>0]
    return '%.2f-%.2f'%(min(v),max(v)) if v else '-'
for k in R:
    row=[]
    for idx,name in ((3,'call'),(4,'tok')):
        row.append(name+' '+' | '.join('%s %s'%(b,sp([r[idx] for r in R[k].get(b,[])])) for b in builds))
    print('%-9s p%-2d %7d  %s'%(k[0],k[1],k[2],'   '.join(row)))
