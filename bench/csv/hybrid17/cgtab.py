import re,subprocess,sys
fns=sys.argv[2:]
out=subprocess.run(['callgrind_annotate','--inclusive=yes',sys.argv[1]],capture_output=True,text=True).stdout
ev=None
for l in out.splitlines():
    if l.startswith('Events shown:'): ev=l.split(':')[1].split()
    for fn in fns:
        if re.search(r':%s(\.[a-z]+\.\d+)? \['%re.escape(fn), l):
            nums=re.sub(r'\([^)]*\)','',l.split('  ')[0] if False else l)
            vals=re.findall(r'(?<![\w/.])(\d{1,3}(?:,\d{3})*|\d+)(?= )', re.sub(r'\([^)]*\)','',l))
            vals=[int(v.replace(',','')) for v in vals[:len(ev)]]
            print(fn, ' '.join('%s=%s'%(e,format(v,',')) for e,v in zip(ev,vals)))
