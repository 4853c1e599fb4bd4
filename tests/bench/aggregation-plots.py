#!/usr/bin/env python3
"""The aggregation lab's plots (docs/aggregation.md): accuracy against epochs (samples folded in over the training
set's size) and against simulated time, one line per gleaner-sim run, from the JSON files of a folder. Needs
Debian's python3-matplotlib.

    tests/bench/aggregation-plots.py DIR OUT.png [--match SUBSTRING ...] [--title TEXT]

Only runs whose file name contains one of the --match substrings are drawn (all when none is given); the
baseline is always drawn, dashed.
"""
import argparse
import glob
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder")
    parser.add_argument("out")
    parser.add_argument("--match", action="append", default=[])
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # Debian's matplotlib belongs to Debian's Python; another python3 may come first on the PATH.
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:])
        sys.exit("aggregation-plots: matplotlib is missing; install Debian's python3-matplotlib")

    runs = {}
    for path in sorted(glob.glob(os.path.join(args.folder, "*.json"))):
        name = os.path.basename(path)[:-5]
        if name == "table" or (args.match and name != "baseline" and not any(m in name for m in args.match)):
            continue
        with open(path) as f:
            runs[name] = json.load(f)
    if "baseline" not in runs:
        sys.exit(f"aggregation-plots: {args.folder}/baseline.json is missing")
    per_epoch = runs["baseline"]["epochs"][0]["samples"]

    figure, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, run in runs.items():
        points = run["validations"]
        style = {"linestyle": "--", "color": "black", "linewidth": 1.5} if name == "baseline" else {"linewidth": 1.2}
        by_epoch.plot([p["samples"] / per_epoch for p in points], [p["accuracy"] for p in points], label=name, **style)
        by_time.plot([p["sim_seconds"] for p in points], [p["accuracy"] for p in points], label=name, **style)
    target = runs["baseline"]["epochs"][0]["accuracy"]
    for axis, label in ((by_epoch, "epochs (samples folded in / training set)"), (by_time, "simulated seconds")):
        axis.axhline(target, color="grey", linewidth=0.8, linestyle=":")
        axis.set_xlabel(label)
        axis.set_ylabel("test accuracy")
        axis.set_ylim(max(0.5, min(p["accuracy"] for r in runs.values() for p in r["validations"])), None)
        axis.grid(alpha=0.3)
    by_time.set_xscale("log")
    by_epoch.legend(fontsize=7, loc="lower right")
    if args.title:
        figure.suptitle(args.title)
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    print(f"aggregation-plots: wrote {args.out}")


if __name__ == "__main__":
    main()
