#!/usr/bin/env python3
"""Checks that the include graph of src/ between modules has no cycle.

A module is a file name without its extension (plan.c and plan.h are the module "plan"; a
private X_impl.h belongs to module X); an
edge a -> b means a file of module a includes a header of module b. The layers of
DESIGN.md (API -> group -> plan -> engine -> transport, algorithms below the planner) only
point down, so any cycle is a defect. comm.h (the communicator's struct, which names the
types of every layer: connections, schedules, the tuner's model) is vocabulary rather than a
layer: what it includes is not an edge. Prints the cycle and exits 1 if there is one.
Usage: scripts/check-includes.py [SRC_DIR]   (any python3)
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
edges = {}


def module(name):
    base = os.path.splitext(name)[0]
    return base[: -len("_impl")] if base.endswith("_impl") else base


for root, _, files in os.walk(src):
    for f in files:
        if not f.endswith((".c", ".h")):
            continue
        mod = module(f)
        with open(os.path.join(root, f), encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m:
                    dep = module(os.path.basename(m.group(1)))
                    if dep != mod and not f == "comm.h":
                        edges.setdefault(mod, set()).add(dep)

state, stack = {}, []


def visit(m):
    state[m] = 1
    stack.append(m)
    for d in sorted(edges.get(m, ())):
        if state.get(d) == 1:
            print("include cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            sys.exit(1)
        if d not in state:
            visit(d)
    stack.pop()
    state[m] = 2


for m in sorted(edges):
    if m not in state:
        visit(m)
print("no include cycle among %d modules of %s" % (len(edges), os.path.normpath(src)))
