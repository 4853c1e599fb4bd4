#!/usr/bin/env python3
"""The most C agents of speed 1 can buy on a job (docs/aggregation.md, "The ceiling"): C agents that exchanged
every mini-batch (synchronous data-parallel training, no staleness, no lost work) would train as one process with
C times the batch, each step taking one agent's time for its own batch. For each C this runs gleaner-sim's
baseline with batch_size x C and each learning rate given, stops it at the job's own baseline's one-pass accuracy
(T1), and divides: ceiling speedup = baseline's one-pass time / (samples to that accuracy / C / rate). No rule on
subtasks of whole shard passes, with agents out of step, can be expected to beat it. --target and
--reference-seconds measure it at another accuracy (T2: the tuned process's best minus half a point, and the time
that process took to reach it).

    tests/bench/aggregation-ceiling.py [--job FILE] [--out DIR] [--agents "4 8 16"] [--lrs "0.002 0.004 0.008"]
                                       [--epochs E] [--jobs N] [--target ACCURACY --reference-seconds S]
                                       [--validate-every N]

Prints the table as Markdown and writes it as JSON to DIR/ceiling.json. Runs whose JSON exists are kept, so an
interrupted run continues where it stopped.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(sim, job, out, name, epochs, validate_every):
    result = os.path.join(out, name + ".json")
    if os.path.exists(result) and os.path.getsize(result) > 0:
        return result
    print(f"aggregation-ceiling: {name}", file=sys.stderr)
    part = result + ".part"
    # Validation every N shards' worth of samples (2 by default): the time to the accuracy is known to N/shards
    # of a pass.
    subprocess.run([sim, job, "--baseline", "--epochs", str(epochs), "--validate-every", str(validate_every),
                    "--quiet", "--json", part], check=True)
    os.replace(part, result)
    return result


def time_to(report, accuracy):
    for point in report["validations"]:
        if point["accuracy"] >= accuracy:
            return point["sim_seconds"]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", default=os.path.join(ROOT, "resources/jobs/fashion-mnist-cnn.json"))
    parser.add_argument("--out", default=os.path.join(ROOT, "build/ceiling"))
    parser.add_argument("--agents", default="4 8 16")
    parser.add_argument("--lrs", default="0.002 0.004 0.008")
    parser.add_argument("--epochs", type=int, default=2, help="longest run per setting (default 2)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    parser.add_argument("--target", type=float, help="the accuracy to reach (default: the job baseline's one-pass)")
    parser.add_argument("--reference-seconds", type=float,
                        help="the reference's simulated seconds to --target (required with it)")
    parser.add_argument("--validate-every", type=int, default=2, help="validation every N shards (default 2)")
    args = parser.parse_args()
    if (args.target is None) != (args.reference_seconds is None):
        parser.error("--target and --reference-seconds go together: the accuracy and the reference's time to it")
    if args.target is not None and not 0 < args.target <= 1:
        parser.error(f"--target {args.target}: an accuracy in (0, 1]")
    if args.validate_every < 1:
        parser.error(f"--validate-every {args.validate_every}: at least 1")
    sim = os.environ.get("GLEANER_SIM", os.path.join(ROOT, "build/bin/gleaner-sim"))
    if not os.access(sim, os.X_OK):
        sys.exit(f"aggregation-ceiling: {sim} is missing; build first (cmake --build build)")
    os.makedirs(args.out, exist_ok=True)
    with open(args.job) as f:
        spec = json.load(f)

    # The job's own baseline (as aggregation-lab.sh runs it): its one-pass accuracy is the target.
    base_spec = dict(spec, target_accuracy=1.0)
    base_job = os.path.join(args.out, "job-baseline.json")
    with open(base_job, "w") as f:
        json.dump(base_spec, f)
    baseline_path = os.path.join(args.out, "baseline.json")
    if not (os.path.exists(baseline_path) and os.path.getsize(baseline_path) > 0):
        print("aggregation-ceiling: baseline", file=sys.stderr)
        subprocess.run([sim, base_job, "--baseline", "--epochs", "1", "--quiet", "--json", baseline_path + ".part"],
                       check=True)
        os.replace(baseline_path + ".part", baseline_path)
    with open(baseline_path) as f:
        baseline = json.load(f)
    one_pass = baseline["epochs"][0]
    target, base_seconds = one_pass["accuracy"], one_pass["sim_seconds"]
    if args.target is not None:
        target, base_seconds = args.target, args.reference_seconds

    settings = []
    for c in [int(x) for x in args.agents.split()]:
        for lr in [float(x) for x in args.lrs.split()]:
            variant = json.loads(json.dumps(spec))
            variant["batch_size"] = spec["batch_size"] * c
            variant["optimizer"]["lr"] = lr
            variant["target_accuracy"] = target  # stops at the first validation that reaches it
            name = f"c{c}-lr{lr:g}" + (f"-to{target:g}" if args.target is not None else "")
            path = os.path.join(args.out, f"job-{name}.json")
            with open(path, "w") as f:
                json.dump(variant, f)
            settings.append((c, lr, name, path))
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda s: run(sim, s[3], args.out, s[2], args.epochs, args.validate_every), settings))

    rows = []
    for (c, lr, name, _), path in zip(settings, results):
        with open(path) as f:
            report = json.load(f)
        seconds = time_to(report, target)  # at speed 1: samples / rate
        ideal = seconds / c if seconds else None
        rows.append({"agents": c, "lr": lr, "batch_size": spec["batch_size"] * c,
                     "samples_to_target": round(seconds * 1000) if seconds else None,
                     "sim_seconds_with_c_agents": round(ideal, 2) if ideal else None,
                     "ceiling_speedup": round(base_seconds / ideal, 2) if ideal else None,
                     "best_accuracy": round(report["best_accuracy"], 4)})
    summary = {"target_accuracy": target, "reference_seconds": base_seconds, "rows": rows}
    name = "ceiling.json" if args.target is None else f"ceiling-to{target:g}.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"reference: {target:.4f} in {base_seconds:g} simulated seconds\n")
    print("| C | batch | lr | seconds with C agents | ceiling speedup |")
    print("|---|---|---|---|---|")
    for r in rows:
        reached = r["ceiling_speedup"] is not None
        print(f"| {r['agents']} | {r['batch_size']} | {r['lr']:g} | "
              f"{r['sim_seconds_with_c_agents'] if reached else 'not reached'} | "
              f"{str(r['ceiling_speedup']) + 'x' if reached else '-'} |")


if __name__ == "__main__":
    main()
