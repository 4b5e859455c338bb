# Tables of the swa17c rounds: python3 summary.py DIR [BUILD ...] (default: before after),
# from DIR/swa-<build>-<round>.txt; ranges over the rounds of each build, and for the
# per-token ratio (a mean over the run, so one preempted call moves it) also the median
# of the rounds in brackets. (swa17b's script, with the medians added.)
import glob, os, re, sys

d, builds = sys.argv[1], sys.argv[2:] or ['before', 'after']
ratio, evict = {}, {}
for path in sorted(glob.glob(os.path.join(d, 'swa-*.txt'))):
    who = os.path.basename(path).split('-')[1]
    for line in open(path):
        m = re.match(r'ratio\s+(\S+)\s+p(\d+)\s+(\d+) swa/full: match ([\d.]+) insert ([\d.]+) '
                     r'finished ([\d.]+) evict ([\d.]+); evict per token ([\d.]+)', line)
        if m:
            key = (m.group(1), int(m.group(2)), int(m.group(3)))
            ratio.setdefault(key, {}).setdefault(who, []).append([float(x) for x in m.groups()[3:]])
        m = re.match(r'swa\s+(\S+) (swa|full) evict \(frees included\)\s+(\d+)\s+(\d+)\s+([\d.]+)', line)
        if m:
            key = (m.group(1), int(m.group(3)), int(m.group(4)))
            evict.setdefault(key, {}).setdefault(who + '-' + m.group(2), []).append(float(m.group(5)))


def span(v):
    v = [x for x in v if x > 0]
    return '%.2f-%.2f' % (min(v), max(v)) if v else '-'


def span_med(v):
    v = sorted(x for x in v if x > 0)
    if not v:
        return '-'
    m = v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2
    return '%.2f-%.2f (%.2f)' % (v[0], v[-1], m)


def group(title):
    return ' | '.join('%s, %s' % (title, b) if i == 0 else b for i, b in enumerate(builds))


head = ['trace', 'page', 'tree', group('SWA evict us'), 'full evict us (all)', group('SWA/full per call'),
        group('per evicted token')] + ['match / insert / finished, %s' % b for b in (builds[0], builds[-1])]
print('| ' + ' | '.join(head) + ' |')
print('|' + '---|' * sum(h.count(' | ') + 1 for h in head))
for key in sorted(ratio, key=lambda k: (k[0] != 'sysprompt', k[1], k[2])):
    e = evict.get(key, {})
    rows = {b: ratio[key].get(b, []) for b in builds}
    col = lambda b, i: span([r[i] for r in rows[b]])
    cells = [key[0], str(key[1]), '10^%d' % (len(str(key[2])) - 1)]
    cells += [span(e.get(b + '-swa', [])) for b in builds]
    cells += [span(sum((e.get(b + '-full', []) for b in builds), []))]
    cells += [col(b, 3) for b in builds] + [span_med([r[4] for r in rows[b]]) for b in builds]
    cells += ['%s / %s / %s' % (col(b, 0), col(b, 1), col(b, 2)) for b in (builds[0], builds[-1])]
    print('| ' + ' | '.join(cells) + ' |')
