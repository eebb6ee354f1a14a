"""spotlab-train declares its options once; the cell language and the worker
must agree with that declaration. Reads `spotlab-train --describe-options
--json` and checks, for every option:

- the kernel offers it in exactly the statements and models it names, in
  the table's order, and its help shows the table's help line and default;
- completion after each statement or model offers exactly its options;
- the kernel's own options (gpus, spot, ...) are none of spotlab-train's;
- the worker turns it into its flag for exactly those kinds of job and
  models, refuses it for another model, and refuses spotlab-train's flags
  that are no option of the cell language (ckpt_dir, ...), while it passes
  over the kernel's own options.

usage: options_agree.py SPOTLAB-TRAIN KERNEL-DUMP WORKER-DUMP"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from checks import check, failures  # noqa: E402

STATEMENTS = ("train", "eval", "sample")
MODELS = ("gpt", "mlp")
def run_json(*argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"{argv[0]} exited {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def json_value(opt, text):
    """The example as a notebook would send it in a spec."""
    if text in (opt.get("choices") or []):
        return text
    if opt["type"] in ("int", "u64"):
        return int(text)
    if opt["type"] == "num":
        return float(text)
    if opt["type"] == "bool":
        return text in ("yes", "true")
    return text


def flag_value(opt, text):
    """The value as the worker writes it after the flag."""
    return "%.9g" % float(text) if opt["type"] == "num" else str(json_value(opt, text))


def main():
    train, kernel_dump, worker_dump = sys.argv[1:4]
    table = run_json(train, "--describe-options", "--json")
    kernel = run_json(kernel_dump)
    by_name = {o["name"]: o for o in table}
    cell = [o for o in table if o["contexts"]]
    check(len(cell) >= 15, f"spotlab-train declares cell options ({len(cell)})")
    for o in table:
        check(set(o["contexts"]) <= set(STATEMENTS + MODELS), f"{o['name']}: known contexts {o['contexts']}")
        check(o["help"] and "\n" not in o["help"], f"{o['name']}: one help line")

    # the kernel's option lists: spotlab-train's, in order, then its own
    own = {}
    for ctx, names in kernel["contexts"].items():
        want = [o["name"] for o in cell if ctx in o["contexts"]]
        got = [n for n in names if n in by_name and by_name[n]["contexts"]]
        check(got == want, f"kernel options of {ctx}: {got} != table's {want}")
        for n in names:
            if n not in want:
                own.setdefault(n, set()).add(ctx)
                check(not (n in by_name and by_name[n]["contexts"]),
                      f"{n} in {ctx}: declared by the kernel and by spotlab-train")
        offered = sorted(kernel["complete"][ctx])
        check(offered == sorted(n + "=" for n in names), f"completion after {ctx}: {offered} vs {names}")
    check({"gpus", "spot", "deadline", "checkpoint_every"} <= set(own), f"kernel's own options {sorted(own)}")

    # help comes from the table
    for o in cell:
        h = kernel["help"].get(o["name"]) or ""
        check(f"{o['name']}={o['metavar']}: {o['help']}" in h, f"help of {o['name']} shows the table's line")
        if o["default"] is not None and o["type"] != "flag":
            check("Default: " in h, f"help of {o['name']} shows the default")
    declared = {d["name"]: d for d in kernel["declared"] if d}

    # the worker: one query per option and place
    queries, expect = [], []
    def ask(kind, spec, what, name, flag=None, value=None, ok=True):
        queries.append({"kind": kind, "spec": spec})
        expect.append((what, name, flag, value, ok))
    base = {"train": {"model": {"type": "gpt"}, "data": "d"}, "eval": {"data": "d"},
            "sample": {}}
    for o in cell:
        ex = o["example"] if o["example"] is not None else o["default"]
        check(ex is not None, f"{o['name']}: an example or a default")
        if ex is None:
            continue
        v = json_value(o, ex if isinstance(ex, str) else json.dumps(ex))
        text = flag_value(o, ex if isinstance(ex, str) else json.dumps(ex))
        for kind in STATEMENTS:
            if not set(o["contexts"]) & set(STATEMENTS):
                break
            opts = {o["name"]: v}
            if kind == "sample":
                opts["prompt"] = "a"
            ask(kind, dict(base[kind], options=opts), f"{kind} {o['name']}={v}", o["name"],
                o["flag"] if kind in o["contexts"] else None, text)
        for model in MODELS:
            if not set(o["contexts"]) & set(MODELS):
                break
            spec = {"model": {"type": model, "options": {o["name"]: v}}, "data": "d"}
            ask("train", spec, f"{model}({o['name']}={v})", o["name"], o["flag"], text,
                ok=model in o["contexts"])
    on_cpu = {"gpus": 0, "precision": "fp32"}  # the dump's instance has no GPU
    for name, ctxs in sorted(own.items()):
        d = declared[name]
        v = on_cpu.get(name, json_value(d, d["example"]))
        check(not set(ctxs) & set(MODELS), f"kernel's own {name} is no model option (the worker "
              "passes every model option to spotlab-train)")
        for kind in sorted(set(ctxs) & set(STATEMENTS)):
            opts = {name: v}
            if kind == "sample":
                opts["prompt"] = "a"
            ask(kind, dict(base[kind], options=opts), f"kernel's own {name} on {kind}", name)
    for o in table:
        if not o["contexts"] and o["name"] not in own:
            ask("train", dict(base["train"], options={o["name"]: "1"}), f"flag {o['name']} as an option",
                o["name"], ok=False)
    r = subprocess.run([worker_dump], input="".join(json.dumps(q) + "\n" for q in queries),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, f"worker dump exits 0: {r.stderr}")
    replies = [json.loads(line) for line in r.stdout.splitlines()]
    check(len(replies) == len(queries), f"{len(replies)} worker replies to {len(queries)} queries")
    for (what, name, flag, value, ok), rep in zip(expect, replies):
        if not ok:
            check(rep["rc"] < 0, f"worker refuses {what}: {rep}")
            continue
        check(rep["rc"] == 0, f"worker accepts {what}: {rep.get('err')}")
        argv = rep.get("argv", [])
        if flag:
            at = [i for i, a in enumerate(argv) if a == flag]
            check(len(at) == 1 and argv[at[0] + 1] == value, f"worker: {what} → {flag} {value}: {argv}")
        elif name in by_name:
            check(by_name[name]["flag"] not in argv, f"worker leaves out {what}: {argv}")
    print(f"{len(table)} options, {len(queries)} worker queries, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
