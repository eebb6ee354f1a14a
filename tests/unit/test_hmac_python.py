"""Signs random cases with spotlab's HMAC and with Python's hmac module."""
import hmac
import hashlib
import os
import random
import subprocess
import sys

tool = sys.argv[1]
rng = random.Random(7)
cases = []
for i in range(200):
    key = os.urandom(rng.choice([1, 16, 32, 36, 63, 64, 65, 128, 300]))
    parts = [os.urandom(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 6))]
    cases.append((key, parts))
# An empty part is an empty token, which vanishes when the line is split:
# that does not change the concatenation being signed.
text = "".join(k.hex() + " " + " ".join(p.hex() for p in ps) + "\n" for k, ps in cases)
out = subprocess.run([tool, "--sign-stdin"], input=text, capture_output=True, text=True,
                     check=True).stdout.split()
failures = 0
for (key, parts), got in zip(cases, out):
    want = hmac.new(key, b"".join(parts), hashlib.sha256).hexdigest()
    if got != want:
        failures += 1
        print(f"mismatch for key of {len(key)} bytes: {got} != {want}")
checked = min(len(out), len(cases))
if len(out) != len(cases):
    print(f"tool answered {len(out)} lines for {len(cases)} cases")
    failures += 1
print(f"{checked} cases compared with Python's hmac, {failures} failures")
sys.exit(1 if failures or checked < 150 else 0)
