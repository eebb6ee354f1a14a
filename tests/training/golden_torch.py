#!/usr/bin/python3
"""Golden values: spotlab-train against the same models in PyTorch.

Runs spotlab-train for a few steps on a tiny gpt and a tiny mlp with
--dump-init (initial parameters, raw float32 in the documented layout) and
--dump-batches (every batch), rebuilds both models in PyTorch from those
weights, trains them on the same batches with torch.optim.AdamW, the same
learning-rate schedule and clip_grad_norm_, and requires every step's loss to
match the metrics lines within 1e-4 relative.

usage: golden_torch.py SPOTLAB_TRAIN"""
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

RTOL = 1e-4
STEPS = 10


def lr_at(step, warmup, total, lr):
    if step < warmup:
        return lr * (step + 1) / warmup
    lo = 0.1 * lr
    prog = min(1.0, (step - warmup) / max(1, total - warmup))
    return lo + 0.5 * (lr - lo) * (1 + math.cos(math.pi * prog))


def run(exe, args, tmp):
    init, batches, metrics = (os.path.join(tmp, n) for n in ("init.bin", "batches.bin", "m.jsonl"))
    for p in (init, batches, metrics):
        if os.path.exists(p):
            os.unlink(p)
    cmd = [exe, *args, "--steps", str(STEPS), "--threads", "1", "--dump-init", init,
           "--dump-batches", batches, "--metrics", metrics]
    subprocess.run(cmd, check=True, timeout=120)
    losses = {}
    with open(metrics) as f:
        for line in f:
            ev = json.loads(line)
            if "loss" in ev and "event" not in ev:
                losses[ev["step"]] = ev["loss"]
    return np.fromfile(init, dtype=np.float32), open(batches, "rb").read(), losses


def take(flat, pos, *shape):
    n = int(np.prod(shape))
    t = torch.tensor(flat[pos[0]:pos[0] + n].reshape(shape), requires_grad=True)
    pos[0] += n
    return t


def gpt_params(flat, V, T, C, L):
    pos = [0]
    P = {"wte": take(flat, pos, V, C), "wpe": take(flat, pos, T, C), "h": []}
    for _ in range(L):
        blk = {}
        for name, shape in (("ln1_w", (C,)), ("ln1_b", (C,)), ("attn_w", (3 * C, C)),
                            ("attn_b", (3 * C,)), ("proj_w", (C, C)), ("proj_b", (C,)),
                            ("ln2_w", (C,)), ("ln2_b", (C,)), ("fc_w", (4 * C, C)),
                            ("fc_b", (4 * C,)), ("fcproj_w", (C, 4 * C)), ("fcproj_b", (C,))):
            blk[name] = take(flat, pos, *shape)
        P["h"].append(blk)
    P["lnf_w"] = take(flat, pos, C)
    P["lnf_b"] = take(flat, pos, C)
    assert pos[0] == flat.size, "layout size mismatch"
    order = [P["wte"], P["wpe"]] + [t for b in P["h"] for t in b.values()] + [P["lnf_w"], P["lnf_b"]]
    return P, order


def gpt_loss(P, x, y, H):
    B, T = x.shape
    C = P["wte"].shape[1]
    hs = C // H
    h = P["wte"][x] + P["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for b in P["h"]:
        a = F.layer_norm(h, (C,), b["ln1_w"], b["ln1_b"], 1e-5)
        q, k, v = F.linear(a, b["attn_w"], b["attn_b"]).split(C, dim=2)
        q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        yy = (att @ v).transpose(1, 2).reshape(B, T, C)
        h = h + F.linear(yy, b["proj_w"], b["proj_b"])
        a = F.layer_norm(h, (C,), b["ln2_w"], b["ln2_b"], 1e-5)
        a = F.gelu(F.linear(a, b["fc_w"], b["fc_b"]), approximate="tanh")
        h = h + F.linear(a, b["fcproj_w"], b["fcproj_b"])
    h = F.layer_norm(h, (C,), P["lnf_w"], P["lnf_b"], 1e-5)
    logits = h @ P["wte"].t()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def train_and_compare(name, order, loss_fn, batches, losses, lr, warmup, wd, clip, betas):
    decay = [p for p in order if p.dim() >= 2]
    nodecay = [p for p in order if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=betas, eps=1e-8)
    worst = 0.0
    bad = 0
    for step, batch in enumerate(batches):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, warmup, STEPS, lr)
        opt.zero_grad()
        loss = loss_fn(*batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(order, clip)
        opt.step()
        ours = losses[step + 1]
        rel = abs(ours - loss.item()) / abs(loss.item())
        worst = max(worst, rel)
        flag = "" if rel <= RTOL else "  <-- MISMATCH"
        bad += rel > RTOL
        print(f"{name} step {step + 1:2d}: spotlab {ours:.7f} torch {loss.item():.7f} rel {rel:.2e}{flag}")
    print(f"{name}: max relative difference {worst:.3e} (tolerance {RTOL})")
    return bad


def main():
    exe = sys.argv[1]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        L, H, C, T, B = 2, 2, 32, 16, 4
        lr, warmup, wd, clip = 3e-3, 3, 0.1, 1.0
        flat, raw, losses = run(exe, ["--model", "gpt", "--layers", str(L), "--heads", str(H),
                                      "--dim", str(C), "--ctx", str(T), "--batch", str(B),
                                      "--lr", str(lr), "--warmup", str(warmup),
                                      "--weight-decay", str(wd), "--grad-clip", str(clip)], tmp)
        per_layer = 12 * C * C + 13 * C
        V = (flat.size - T * C - L * per_layer - 2 * C) // C
        ints = np.frombuffer(raw, dtype=np.int32).reshape(STEPS, 2, B, T)
        batches = [(torch.tensor(ints[s, 0], dtype=torch.long), torch.tensor(ints[s, 1], dtype=torch.long))
                   for s in range(STEPS)]
        assert len(losses) == STEPS, losses
        P, order = gpt_params(flat, V, T, C, L)
        failures += train_and_compare("gpt", order, lambda x, y: gpt_loss(P, x, y, H), batches,
                                      losses, lr, warmup, wd, clip, (0.9, 0.95))

        hidden, layers, B = 32, 2, 16
        lr, warmup = 1e-2, 2
        flat, raw, losses = run(exe, ["--model", "mlp", "--hidden", str(hidden), "--layers",
                                      str(layers), "--batch", str(B), "--lr", str(lr),
                                      "--warmup", str(warmup), "--weight-decay", str(wd),
                                      "--grad-clip", str(clip)], tmp)
        pos = [0]
        order = []
        widths = [784] + [hidden] * layers + [10]
        for i in range(layers + 1):
            order.append(take(flat, pos, widths[i + 1], widths[i]))
            order.append(take(flat, pos, widths[i + 1]))
        assert pos[0] == flat.size, "mlp layout size mismatch"
        rec = B * 784 * 4 + B * 4
        assert len(raw) == STEPS * rec, "batch dump size"
        batches = []
        for s in range(STEPS):
            chunk = raw[s * rec:(s + 1) * rec]
            x = torch.tensor(np.frombuffer(chunk[:B * 784 * 4], dtype=np.float32).reshape(B, 784))
            y = torch.tensor(np.frombuffer(chunk[B * 784 * 4:], dtype=np.int32), dtype=torch.long)
            batches.append((x, y))

        def mlp_loss(x, y):
            h = x
            for i in range(layers + 1):
                h = F.linear(h, order[2 * i], order[2 * i + 1])
                if i < layers:
                    h = F.relu(h)
            return F.cross_entropy(h, y)

        failures += train_and_compare("mlp", order, mlp_loss, batches, losses, lr, warmup, wd,
                                      clip, (0.9, 0.999))
    if failures:
        print(f"FAIL: {failures} step(s) differ by more than {RTOL} relative")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
