"""The policy grid: scenarios over the shared spot traces, each run through
`spotlab-sim --policy NAME ... --json` for every policy, and the summary
(cost against the hindsight optimum, deadlines met, savings against
on-demand). bench/policy prints the whole grid; the slow test runs a part
of it and checks bounds. The jobs go through `spotlab-sim --batch`, 64 to a
process; each is the line a single `spotlab-sim --policy` would take.

A scenario is a job (work hours, deadline hours, restart overhead hours)
started at one tick of one trace, or of all the zones of one folder
together. Multi-node traces count how many instances a zone offered; a job
there needs all of them (the folder's largest count) at once. Start ticks
are spread evenly over the ticks where the window fits, so most jobs have
history before them to learn from and the first has none."""
import concurrent.futures
import json
import os
import subprocess
from dataclasses import dataclass, field

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'shared',
                      'data', 'spot-traces')
POLICIES = ['optimal', 'spotlab', 'uniform-progress', 'greedy', 'ondemand']
WORK_H = [8, 24, 48]
RATIOS = [1.25, 1.5, 2.0]
OVERHEAD_H = [0.1, 0.2]
STARTS = 4

# On-demand USD per instance-hour by the instance type a trace file names.
# p3.2xlarge from ../shared/data/aws/gpu-prices-2025.csv; traces without a
# price column get the same spot share of it as p3.2xlarge's trace prices
# (0.918 of 3.06, 30%). r5.16xlarge: AWS's us-east-1 list price.
ONDEMAND = {'v100': 3.06, 'k80': 3.06, 'intel': 4.032, 'c3': 3.06}
SPOT_SHARE = 0.3


@dataclass
class Trace:
    path: str
    gap: float
    n: int
    max_avail: int


@dataclass
class Scenario:
    name: str              # folder or file, for the report
    traces: list           # [Trace]
    nodes: int
    work: float
    deadline: float
    overhead: float
    start: int
    ondemand: float
    spot: float
    results: dict = field(default_factory=dict)

    def args(self, sim, policy):
        a = [sim, '--policy', policy]
        for t in self.traces:
            a += ['--trace', t.path]
        a += ['--start-tick', str(self.start), '--work', repr(self.work), '--deadline',
              repr(self.deadline), '--restart-overhead', repr(self.overhead),
              '--spot-price', repr(self.spot), '--ondemand-price', repr(self.ondemand),
              '--nodes', str(self.nodes), '--json']
        return a


def load(path):
    with open(path) as f:
        d = json.load(f)
    return Trace(path, float(d['metadata']['gap_seconds']), len(d['data']), max(d['data']))


def kind_of(path):
    base = os.path.basename(path)
    for k in ONDEMAND:
        if k in base:
            return k
    return 'v100'


def groups(root=TRACES):
    """(name, [Trace], multi_zone) for every file and every folder's zones of one type."""
    out = []
    for dirpath, _, files in sorted(os.walk(root)):
        files = sorted(f for f in files if f.endswith('.json'))
        if not files:
            continue
        traces = [load(os.path.join(dirpath, f)) for f in files]
        rel = os.path.relpath(dirpath, root)
        for t in traces:
            out.append((os.path.join(rel, os.path.basename(t.path)), [t], False))
        by_type = {}
        for t in traces:
            # us-west-2a_v100_1.json: the zone, then the type
            by_type.setdefault(os.path.basename(t.path).split('_', 1)[1], []).append(t)
        for typ, ts in sorted(by_type.items()):
            if len(ts) > 1:
                out.append((rel + '/*_' + typ, ts, True))
    return out


def scenarios(root=TRACES, work=WORK_H, ratios=RATIOS, overheads=OVERHEAD_H, starts=STARTS,
              zones='both'):
    out = []
    for name, ts, multi in groups(root):
        if (zones == 'single' and multi) or (zones == 'multi' and not multi):
            continue
        gap = ts[0].gap
        n = min(t.n for t in ts)
        nodes = max(t.max_avail for t in ts)
        od = ONDEMAND[kind_of(ts[0].path)]
        for w in work:
            for r in ratios:
                window = int(w * r * 3600 / gap + 1e-9)
                if window > n:
                    continue  # the trace is shorter than the window
                for o in overheads:
                    last = n - window
                    for k in range(starts):
                        start = last * k // max(1, starts - 1) if starts > 1 else 0
                        out.append(Scenario(name, ts, nodes, w, w * r, o, start, od,
                                            od * SPOT_SHARE))
    return out


# Jobs per `spotlab-sim --batch` process: few enough that the processes
# share the work evenly, many enough that starting them costs little.
BATCH = 64


def run_batch(sim, tasks):
    """[(scenario, policy)] through one `spotlab-sim --batch`; each result into its scenario."""
    lines = ''.join(json.dumps(sc.args(sim, pol)[1:]) + '\n' for sc, pol in tasks)
    p = subprocess.run([sim, '--batch'], input=lines, capture_output=True, text=True,
                       timeout=600 + 10 * len(tasks))
    out = p.stdout.splitlines()
    if p.returncode != 0 or len(out) != len(tasks):
        raise RuntimeError('%s --batch: exit %d, %d reports for %d jobs: %s'
                           % (sim, p.returncode, len(out), len(tasks), p.stderr.strip()))
    for (sc, pol), line in zip(tasks, out):
        r = json.loads(line)
        if 'exit' in r:
            raise RuntimeError('%s: exit %d: %s' % (' '.join(sc.args(sim, pol)), r['exit'],
                                                    r['error']))
        sc.results[pol] = r


def run(sim, scs, policies=POLICIES, jobs=None):
    jobs = jobs or os.cpu_count() or 2
    tasks = [(sc, pol) for sc in scs for pol in policies]
    chunks = [tasks[i:i + BATCH] for i in range(0, len(tasks), BATCH)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        for f in [ex.submit(run_batch, sim, c) for c in chunks]:
            f.result()
    return scs


def summary(scs, policies=POLICIES):
    """Per policy: mean and worst cost / optimum, deadlines met, savings against on-demand."""
    out = {}
    for pol in policies:
        ratios, met, save = [], 0, []
        for sc in scs:
            r, opt, od = sc.results[pol], sc.results['optimal'], sc.results['ondemand']
            ratios.append(r['cost_usd'] / opt['cost_usd'])
            met += bool(r['deadline_met'])
            save.append(1 - r['cost_usd'] / od['cost_usd'])
        worst = max(range(len(scs)), key=lambda i: ratios[i])
        out[pol] = {'mean': sum(ratios) / len(ratios), 'worst': ratios[worst],
                    'worst_at': scs[worst], 'met': met, 'n': len(scs),
                    'savings': sum(save) / len(save)}
    return out
