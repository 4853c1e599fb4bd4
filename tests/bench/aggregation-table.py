#!/usr/bin/env python3
"""The aggregation lab's table (docs/aggregation.md): reads the gleaner-sim JSON files of a folder and prints, per
run, the time to reach the baseline's one-pass accuracy, the speedup over the baseline, the share of the ideal
speedup (the sum of the agents' speeds) and the best accuracy, as Markdown, and the same as JSON in table.json.

With single-process runs at other learning rates beside baseline.json (baseline-NAME.json, gleaner-sim --baseline
on a copy of the job), it also reports against the fair references: the tuned baseline is the one with the best
accuracy; T1 is its one-pass accuracy and T2 its best minus 0.5 point. Each run's time to T1 and to T2 is divided
into the tuned baseline's and the job baseline's (when that reaches it), and the job's measured useful agents
(gleaner-sim's "width") are listed.

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
    baselines = {"baseline": baseline}
    for path in sorted(glob.glob(os.path.join(folder, "baseline-*.json"))):
        with open(path) as f:
            baselines[os.path.basename(path)[:-5]] = json.load(f)
    tuned_name = max(baselines, key=lambda name: baselines[name]["best_accuracy"])
    tuned = baselines[tuned_name]
    t1 = tuned["epochs"][0]["accuracy"]
    t2 = round(tuned["best_accuracy"] - 0.005, 4)
    refs = {"T1": t1, "T2": t2}
    ref_times = {key: {"tuned": time_to(tuned, value), "job": time_to(baseline, value)} for key, value in refs.items()}
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(path)[:-5]
        if name in ("baseline", "table") or name.startswith("baseline-"):
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
            "useful_agents": (run.get("width") or {}).get("useful_agents"),
        })
        for key, value in refs.items():
            reached = time_to(run, value)
            rows[-1][f"time_to_{key}"] = reached
            for which in ("tuned", "job"):
                ref = ref_times[key][which]
                rows[-1][f"speedup_{key}_{which}"] = round(ref / reached, 2) if ref and reached else None
    rows.sort(key=lambda r: (r["rule"], r["agents"], r["run"]))
    summary = {"baseline_one_pass_accuracy": target, "baseline_one_pass_seconds": base_time,
               "baseline_best_accuracy": baseline["best_accuracy"], "tuned_baseline": tuned_name, "T1": t1, "T2": t2,
               "reference_times": ref_times, "runs": rows}
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
    print(f"\nfair references: tuned baseline {tuned_name}; T1 {t1:.4f} (tuned {ref_times['T1']['tuned']} s, job's "
          f"{ref_times['T1']['job']} s), T2 {t2:.4f} (tuned {ref_times['T2']['tuned']} s, job's {ref_times['T2']['job']} s)\n")
    print("| run | C | useful agents | time to T1 (s) | vs tuned | vs job's | time to T2 (s) | vs tuned | vs job's |")
    print("|---|---|---|---|---|---|---|---|---|")
    cell = lambda v, unit="": "-" if v is None else f"{v:g}{unit}"
    for r in rows:
        print(f"| {r['run']} | {r['agents']} | {cell(r['useful_agents'])} | {cell(r['time_to_T1'])} | "
              f"{cell(r['speedup_T1_tuned'], 'x')} | {cell(r['speedup_T1_job'], 'x')} | {cell(r['time_to_T2'])} | "
              f"{cell(r['speedup_T2_tuned'], 'x')} | {cell(r['speedup_T2_job'], 'x')} |")


if __name__ == "__main__":
    main()
