#!/usr/bin/env python3
"""The aggregation lab's table (docs/aggregation.md): reads the gleaner-sim JSON files of a folder and prints, per
run, the time to reach the baseline's one-pass accuracy, the speedup over the baseline, the share of the ideal
speedup (the sum of the agents' speeds) and the best accuracy, as Markdown, and the same as JSON in table.json.

    tests/bench/aggregation-table.py DIR
"""
import glob
import json
import os
import sys


def time_to(run, accuracy):
    for point in run["validations"]:
        if point["accuracy"] >= accuracy:
            return point["sim_seconds"]
    return None


def main():
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    folder = sys.argv[1]
    try:
        with open(os.path.join(folder, "baseline.json")) as f:
            baseline = json.load(f)
    except OSError as error:
        sys.exit(f"aggregation-table: {error}; run gleaner-sim JOB --baseline --json {folder}/baseline.json first")
    one_pass = baseline["epochs"][0]
    target, base_time = one_pass["accuracy"], one_pass["sim_seconds"]
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(path)[:-5]
        if name in ("baseline", "table"):
            continue
        with open(path) as f:
            run = json.load(f)
        t = time_to(run, target)
        ideal = sum(run["speeds"])
        speedup = base_time / t if t else None
        rows.append({
            "run": name, "rule": run["rule"], "agents": run["agents"], "ideal": round(ideal, 2),
            "time_to_target": t, "speedup": round(speedup, 2) if speedup else None,
            "share_of_ideal": round(speedup / ideal, 2) if speedup else None,
            "best_accuracy": round(run["best_accuracy"], 4),
            "best_minus_baseline": round(run["best_accuracy"] - baseline["best_accuracy"], 4),
            "mean_staleness": round(run["mean_staleness"], 2),
        })
    rows.sort(key=lambda r: (r["rule"], r["agents"], r["run"]))
    summary = {"baseline_one_pass_accuracy": target, "baseline_one_pass_seconds": base_time,
               "baseline_best_accuracy": baseline["best_accuracy"], "runs": rows}
    with open(os.path.join(folder, "table.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"baseline: one pass {target:.4f} at {base_time:g} s; best {baseline['best_accuracy']:.4f}\n")
    print("| run | rule | C | time to one-pass accuracy (s) | speedup | of ideal | best | best - baseline | staleness |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        t = f"{r['time_to_target']:g}" if r["time_to_target"] else "not reached"
        s = f"{r['speedup']:.2f}x" if r["speedup"] else "-"
        share = f"{100 * r['share_of_ideal']:.0f}%" if r["share_of_ideal"] else "-"
        print(f"| {r['run']} | {r['rule']} | {r['agents']} | {t} | {s} | {share} | {r['best_accuracy']:.4f} | "
              f"{r['best_minus_baseline']:+.4f} | {r['mean_staleness']} |")


if __name__ == "__main__":
    main()
