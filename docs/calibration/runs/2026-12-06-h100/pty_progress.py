#!/usr/bin/env python3
"""calibrate's progress line on a terminal: runs `moesim calibrate` with stderr on a pty (read
while it runs), saves what the terminal received and checks that the counts rise to "N / N
measurements" and that the log lines stay beside the line. usage: pty_progress.py MOESIM OUTDIR"""
import os
import pty
import re
import subprocess
import sys
import threading

moesim, out = sys.argv[1], sys.argv[2]
master, slave = pty.openpty()
chunks = []


def drain():
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            return
        if not chunk:
            return
        chunks.append(chunk)


reader = threading.Thread(target=drain)
reader.start()
p = subprocess.run([moesim, "calibrate", "--quick", "--only", "gemm,memory,copies,loss", "--out",
                    os.path.join(out, "calibrate_quick.json")], stderr=slave, timeout=280)
os.close(slave)
reader.join()
err = b"".join(chunks).decode(errors="replace")
open(os.path.join(out, "calibrate_pty.txt"), "w").write(err)
counts = [(int(d), int(t)) for d, t in re.findall(r"\] (\d+) / (\d+) measurements", err)]
ok = (p.returncode == 0 and counts and counts[-1][0] == counts[-1][1] > 0
      and all(a[0] <= b[0] and a[1] == b[1] for a, b in zip(counts, counts[1:])))
logs = "\rcalibrate: gemm" in err.replace("\x1b[K", "")
print(f"calibrate rc {p.returncode}; {len(counts)} progress draws, last {counts[-1] if counts else None}; "
      f"counts rise to N / N: {'yes' if ok else 'NO'}; log lines beside it: {'yes' if logs else 'NO'}")
print("last 300 chars:", repr(err[-300:]))
