#!/usr/bin/env python3
"""Names the addresses of an engram-cli crash report (the stderr of the crashed run): the pc
and the return address on top of the stack, found in the report's memory map, as file + offset
+ function (addr2line).

    python3 tools/resolve_crash.py crash.err
"""
import re
import subprocess
import sys

text = open(sys.argv[1], errors="replace").read()
maps = []
for m in re.finditer(r"^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \S+\s+(/\S+)$", text, re.M):
    maps.append((int(m[1], 16), int(m[2], 16), int(m[3], 16), m[4]))
for label in ("pc", "[sp]"):
    m = re.search(re.escape(label) + r" (0x[0-9a-f]+)", text)
    if not m:
        continue
    addr = int(m[1], 16)
    hit = next((x for x in maps if x[0] <= addr < x[1]), None)
    if not hit:
        print(f"{label} {m[1]}: not in a mapped file")
        continue
    rel = hex(addr - hit[0] + hit[2])
    name = subprocess.run(["addr2line", "-f", "-C", "-e", hit[3], rel], capture_output=True,
                          text=True).stdout.split("\n")[0]
    print(f"{label} {m[1]}: {hit[3]} +{rel} {name}")
