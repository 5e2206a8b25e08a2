#!/usr/bin/env python3
"""Per-hop breakdown of `rbcastd bench -ping` round trips from RBCAST_STAMPS.

Usage: breakdown.py DIR [SLOW_US]

DIR holds one file per process (internal/hops, Dump): the pinger (bench
-ping), the echo (bench -echo) and the daemons, all run with
RBCAST_STAMPS=DIR. The daemon whose -socket the pinger used is A, the
echo's is B. With internal/hops/runtime-probes.patch applied the runtime's
and the ring's stages (30-41) are in the chain too; without it those rows
are skipped. For each ping (the first 5 % are left out) it follows the
chain, taking at each row the first stamp of that stage in that process
after the row before, and prints the percentiles of each step. With SLOW_US it then takes the
pings whose round trip is at least SLOW_US µs and says, for each step,
how often it was the slowest one and by how much it exceeded its own
median (where the tail's time went).
"""
import bisect, glob, os, re, statistics, sys

d = sys.argv[1]
procs, socks = {}, {}
for f in glob.glob(os.path.join(d, '*')):
    lines = open(f).read().split('\n')
    if not lines or not lines[0].startswith('#'):
        continue
    name = lines[0]
    ev = [tuple(map(int, l.split())) for l in lines[1:] if l]
    m = re.search(r'-socket (\S+)', name)
    sock = m.group(1) if m else ''
    if ' -ping' in name:
        procs['P'], socks['P'] = ev, sock
    elif ' -echo' in name:
        procs['E'], socks['E'] = ev, sock
    elif ' run ' in name:
        procs[sock] = ev
        if '-order total' in name and '-node 0' in name:
            procs['S'] = ev  # the sequencer (member 0)
procs['A'] = procs.get(socks.get('P'), [])
procs['B'] = procs.get(socks.get('E'), [])
times = {k: [e[0] for e in v] for k, v in procs.items()}

def first(role, stage, after, cond, before):
    ev, ts = procs[role], times[role]
    stages = stage if isinstance(stage, tuple) else (stage,)
    for e in ev[bisect.bisect_right(ts, after):]:
        if e[0] > before:
            return None
        if e[1] in stages and (cond is None or cond(e[2])):
            return e
    return None

has_runtime = any(e[1] == 30 for e in procs['A'])
chain = [
    ('P', 1, None, 'pinger writes the ping'),
    ('A', 60, None, 'daemon A reads it [0 at once, 1 polling, 2 woken]'),
    ('A', 21, None, 'daemon A: Group.Send returned'),
    ('A', (30, 36), None, 'daemon A: loop woken [30], or Send sends [36] (runtime)'),
    ('A', 32, lambda a: a > 0, 'daemon A: frame staged (runtime)'),
    ('A', 34, None, 'daemon A: kicker runs [1: Send kicks] (runtime)'),
    ('A', 35, None, 'daemon A: Kick returned (the sendto)'),
    ('B', 30, lambda a: a > 0, 'daemon B: the loop has the frame (runtime)'),
    ('B', 33, None, 'daemon B: delivered (runtime)'),
    ('B', 50, None, 'daemon B: fan-out has it'),
    ('B', 51, None, 'daemon B: Deliver written'),
    ('E', 60, None, 'echo reads it [0, 1, 2]'),
    ('E', 11, None, 'echo wrote the echo'),
    ('B', 60, None, 'daemon B reads it [0, 1, 2]'),
    ('B', 21, None, 'daemon B: Group.Send returned'),
    ('B', (30, 36), None, 'daemon B: loop woken [30], or Send sends [36] (runtime)'),
    ('B', 32, lambda a: a > 0, 'daemon B: frame staged (runtime)'),
    ('B', 34, None, 'daemon B: kicker runs [1: Send kicks] (runtime)'),
    ('B', 35, None, 'daemon B: Kick returned (the sendto)'),
    ('A', 30, lambda a: a > 0, 'daemon A: the loop has the frame (runtime)'),
    ('A', 33, None, 'daemon A: delivered (runtime)'),
    ('A', 50, None, 'daemon A: fan-out has it'),
    ('A', 51, None, 'daemon A: Deliver written'),
    ('P', 60, None, 'pinger reads it [0, 1, 2]'),
    ('P', 2, None, 'pinger has the echo'),
]
if 'E' not in procs and 'S' in procs:
    # bench -ping <own id> under -order total at a member that is not the
    # sequencer: the request crosses to the sequencer, its SeqData back;
    # with the default majority quorum the sequencer delivers, and
    # announces, only what another member acknowledged as held, so the
    # member's status crosses to it and the safe point back: four
    # crossings (docs/protocols.md, "Told is never lost while a majority
    # survives"). Without the runtime probes only the daemons' and
    # clients' rows remain.
    chain = [
        ('P', 1, None, 'pinger writes the ping'),
        ('A', 60, None, 'daemon A reads it [0 at once, 1 polling, 2 woken]'),
        ('A', 21, None, 'daemon A: Group.Send returned'),
        ('A', (30, 36), None, 'daemon A: loop woken [30], or Send sends [36] (runtime)'),
        ('A', 32, lambda a: a > 0, 'daemon A: request staged (runtime)'),
        ('A', 35, None, 'daemon A: request kicked (the sendto returned)'),
        ('S', 30, lambda a: a > 0, 'sequencer: the loop has the request (runtime)'),
        ('S', 32, lambda a: a > 0, 'sequencer: SeqData staged (runtime)'),
        ('S', 34, None, 'sequencer: kicker runs (runtime)'),
        ('S', 35, None, 'sequencer: SeqData kicked (runtime)'),
        ('A', 30, lambda a: a > 0, 'daemon A: the loop has the SeqData (runtime)'),
        ('A', 32, lambda a: a > 0, 'daemon A: its status staged (runtime)'),
        ('A', 34, None, 'daemon A: kicker runs (runtime)'),
        ('A', 35, None, 'daemon A: status kicked (runtime)'),
        ('S', 30, lambda a: a > 0, 'sequencer: the loop has the status (runtime)'),
        ('S', 32, lambda a: a > 0, 'sequencer: safe point staged (runtime)'),
        ('S', 34, None, 'sequencer: kicker runs (runtime)'),
        ('S', 35, None, 'sequencer: safe point kicked (runtime)'),
        ('A', 30, lambda a: a > 0, 'daemon A: the loop has the safe point (runtime)'),
        ('A', 33, None, 'daemon A: delivered (runtime)'),
        ('A', 50, None, 'daemon A: fan-out has it'),
        ('A', 51, None, 'daemon A: Deliver written'),
        ('P', 60, None, 'pinger reads it [0, 1, 2]'),
        ('P', 2, None, 'pinger has its message'),
    ]
if any(e[1] == 36 for e in procs['A'] + procs['B']):
    # Sends that send their frames themselves stamp 36 before they
    # return (21): the rows from the read to 36 then include the Send.
    chain = [c for c in chain if c[1] != 21]
if not has_runtime:
    chain = [c for c in chain if not 30 <= min(c[1] if isinstance(c[1], tuple) else (c[1],)) <= 41]
pings = [e for e in procs['P'] if e[1] == 1]
ends = {e[2]: e[0] for e in procs['P'] if e[1] == 2}
deltas = [[] for _ in chain]
args = [{} for _ in chain]
byarg = [{} for _ in chain]  # a socket read's deltas by how it read
total = []
rows = []  # per followed ping: (round trip, [step deltas])
for p in pings[len(pings) // 20:]:
    if p[2] not in ends:
        continue
    t, row, hits = p[0], [], []
    for role, st, cond, _ in chain[1:]:
        e = first(role, st, t, cond, ends[p[2]] + 1)
        if e is None:
            break
        row.append(e[0] - t)
        hits.append(e[1] if isinstance(st, tuple) else e[2])  # which stage, or its arg
        t = e[0]
    else:
        for k, v in enumerate(row, 1):
            deltas[k].append(v)
            args[k][hits[k - 1]] = args[k].get(hits[k - 1], 0) + 1
            byarg[k].setdefault(hits[k - 1], []).append(v)
        total.append(ends[p[2]] - p[0])
        rows.append((ends[p[2]] - p[0], row, hits, p[0]))
if not total:
    sys.exit('no ping could be followed through the chain')
total.sort()
print('%d pings followed; round trip p50 %.1f µs, p90 %.1f µs' % (len(total), total[len(total) // 2] / 1e3, total[len(total) * 9 // 10] / 1e3))
for k, (role, st, cond, what) in enumerate(chain[1:], 1):
    v = sorted(deltas[k])
    a = ''
    if st == 60 or st == 34 or st == (30, 36):
        a = ' '.join('%d:%d (p50 %.1f)' % (x, c, sorted(byarg[k][x])[c // 2] / 1e3) for x, c in sorted(args[k].items()))
    print('%-52s p50 %6.1f  p90 %6.1f  mean %6.1f µs  %s' % (what, v[len(v) // 2] / 1e3, v[len(v) * 9 // 10] / 1e3, statistics.mean(v) / 1e3, a))

if len(sys.argv) > 2:
    slow = float(sys.argv[2]) * 1e3
    med = [0] + [sorted(deltas[k])[len(deltas[k]) // 2] for k in range(1, len(chain))]
    tail = [r for r in rows if r[0] >= slow]
    print('\n%d of %d pings took >= %.0f µs; the slowest step of each, and each step over its median:' % (len(tail), len(rows), slow / 1e3))
    worst = {}
    over = [[] for _ in chain]
    for tt, row, hits, _ in tail:
        ex = [row[k - 1] - med[k] for k in range(1, len(chain))]
        k = max(range(len(ex)), key=lambda i: ex[i]) + 1
        worst[k] = worst.get(k, 0) + 1
        for j in range(1, len(chain)):
            over[j].append(ex[j - 1])
    for k in range(1, len(chain)):
        v = sorted(over[k])
        if not v:
            continue
        print('%-52s slowest in %4d  excess p50 %7.1f  max %7.1f µs' % (chain[k][3], worst.get(k, 0), v[len(v) // 2] / 1e3, v[-1] / 1e3))
    print('the slowest, each step in µs (the ping written at CLOCK_MONOTONIC ns):')
    for tt, row, hits, t0 in sorted(tail)[-15:]:
        print('%7.1f µs at %d: %s' % (tt / 1e3, t0, ' '.join('%.0f' % (x / 1e3) for x in row)))
