# Summary of the before/after A/B in ab/ (session 8, radix15): per replay and row, each binary's
# range and median of the per-round medians over the rounds; usage: python3 ab_summary.py ab
import sys,glob,re,collections,statistics
d=sys.argv[1]
rows=collections.defaultdict(list)
for f in sorted(glob.glob(d+'/*.txt')):
    m=re.match(r'(.*)-(\w+-\d+-\d+)-(\d+)\.txt',f.split('/')[-1]); b,sel,r=m.groups()
    for line in open(f):
        if line.startswith(('trace','split')) and ('evict' in line or 'unfinished' in line or 'finished' in line):
            parts=line.split()
            idx=[i for i,p in enumerate(parts) if p.isdigit()][0]
            op=' '.join(parts[1:idx])
            if op.split()[0]+'-'+parts[idx]+'-'+parts[idx+1] != sel: continue
            rows[(sel,op,b)].append((float(parts[idx+2]),float(parts[idx+3]),int(parts[idx+4])))
bins=['before','beforeB','after']
print('| replay | row | ' + ' | '.join(f'{b} median (range; med)' for b in bins)+' | after p99 range |')
print('|---|---|'+'---|'*(len(bins)+1))
for (sel,op) in sorted(set((k[0],k[1]) for k in rows)):
    cells=[]
    for b in bins:
        v=[x[0] for x in rows.get((sel,op,b),[])]
        cells.append(f'{min(v):.2f}-{max(v):.2f}; {statistics.median(v):.2f}' if v else '')
    p=[x[1] for x in rows.get((sel,op,'after'),[])]
    print(f'| {sel} | {op} | '+' | '.join(cells)+f' | {min(p):.1f}-{max(p):.1f} |')
