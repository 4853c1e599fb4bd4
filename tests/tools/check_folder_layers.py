#!/usr/bin/env python3
"""The coordinator's and the agent's folders are layers: a file includes headers of its own folder and of the
folders below it, never of one above (docs/architecture.md, "Which folder may include which").

  check_folder_layers.py ROOT            checks the tree at ROOT; exits 1 naming every upward include
  check_folder_layers.py --self-test ROOT  also checks that an upward include planted in a copy is caught
  check_folder_layers.py --graph ROOT    prints the include graph by folder (for reviews)
"""
import collections
import os
import re
import shutil
import sys
import tempfile

# Lowest first. A folder may include a folder of a lower rank, or one of its own rank only when the pair is
# listed in SIDEWAYS. A folder not listed here is an error: a new folder takes a place in the order.
LAYERS = {
    "coordinator": [
        ["http", "store", "admission"],
        ["metrics", "enrollment", "events"],
        ["config", "validation"],
        ["aggregation"],
        ["jobs"],
        ["scheduling"],
        ["views"],
        ["intake"],
        ["leasing"],
        ["lifecycle"],
        ["peers"],
        ["core"],
        ["dashboard"],
        ["api"],
        ["cli", "sim"],
    ],
    "agent": [
        ["policy"],
        ["net", "cache", "gpu", "idle", "power", "system", "worker"],
        ["runner", "config", "control"],
        ["daemon"],
        ["cli"],
    ],
}
SIDEWAYS = set()
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def ranks(program):
    return {folder: rank for rank, row in enumerate(LAYERS[program]) for folder in row}


def graph(root, program):
    """folder -> {included folder: [(file, header)]} for the includes that cross folders."""
    base = os.path.join(root, program)
    folders = {d for d in os.listdir(base) if os.path.isdir(os.path.join(base, d))}
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for dirpath, _, files in os.walk(base):
        rel = os.path.relpath(dirpath, base)
        if rel == ".":
            continue
        source = rel.split(os.sep)[0]
        for name in sorted(files):
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for header in INCLUDE.findall(text):
                target = header.split("/")[0]
                if "/" in header and target in folders and target != source:
                    edges[source][target].append((os.path.relpath(path, root), header))
    return folders, edges


def check(root):
    problems = []
    for program in LAYERS:
        rank = ranks(program)
        folders, edges = graph(root, program)
        for folder in sorted(folders - set(rank)):
            if any(n.endswith((".h", ".cpp")) for _, _, fs in os.walk(os.path.join(root, program, folder)) for n in fs):
                problems.append(f"{program}/{folder}: a folder with no place in the layers of "
                                f"tests/tools/check_folder_layers.py; give it one (and in docs/architecture.md)")
        for source, targets in sorted(edges.items()):
            for target, uses in sorted(targets.items()):
                if source not in rank or target not in rank:
                    continue
                upward = rank[target] > rank[source]
                sideways = rank[target] == rank[source] and (program, source, target) not in SIDEWAYS
                if upward or sideways:
                    for path, header in uses:
                        problems.append(f"{path}: includes \"{header}\": {program}/{source} may not include "
                                        f"{program}/{target} ({'a layer above' if upward else 'the same layer'})")
    return problems


def self_test(root):
    """An upward include planted in a copy of the coordinator and the agent must be found."""
    with tempfile.TemporaryDirectory() as scratch:
        for program in LAYERS:
            shutil.copytree(os.path.join(root, program), os.path.join(scratch, program),
                            ignore=shutil.ignore_patterns("web", "node_modules"))
        planted = {
            os.path.join(scratch, "coordinator", "store", "Planted.h"): '#include "core/Coordinator.h"\n',
            os.path.join(scratch, "agent", "policy", "Planted.h"): '#include "daemon/AgentDaemon.h"\n',
        }
        for path, text in planted.items():
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        found = check(scratch)
        missed = [p for p in planted if not any(os.path.relpath(p, scratch) in line for line in found)]
        return [f"self-test: the planted upward include in {os.path.relpath(p, scratch)} was not caught"
                for p in missed]


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = args[0]
    if "--graph" in argv:
        for program in LAYERS:
            _, edges = graph(root, program)
            print(program)
            for source in sorted(edges):
                print(f"  {source} -> " + ", ".join(f"{t} ({len(u)})" for t, u in sorted(edges[source].items())))
        return 0
    problems = check(root)
    if "--self-test" in argv:
        problems += self_test(root)
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print(f"check_folder_layers: {len(problems)} include(s) break the layers", file=sys.stderr)
        return 1
    print("check_folder_layers: every include of coordinator/ and agent/ goes down the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
