#!/usr/bin/env python3
"""A stand-in for `gleaner-agent run` in the browser test, until the real daemon exists: the agent protocol from
tests/tools/protocol_client.py (enroll, lease, files, progress, result with Expect: 100-continue, manifests verified
with the pinned signing key) around the real `gleaner-worker`, which trains each subtask with libtorch.

    standin_agent.py --url https://127.0.0.1:PORT --token gle_... --ca cert.pem --data-dir DIR --worker PATH
                     [--max-retry-after S]

One JSON object per line on stdout for each step ({"event": "lease", "tasks": 1, ...}); the test reads them. It
exits 0 when the coordinator refuses it (403: revoked), and on SIGTERM.
"""

import argparse
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from protocol_client import Client, ManifestError, verify_manifest  # noqa: E402

running = True


def log(**fields):
    fields.setdefault("at_ms", int(time.time() * 1000))
    print(json.dumps(fields), flush=True)


def stop(signum, frame):
    global running
    running = False


def fetch(client, token, sha, size, cache_dir):
    path = os.path.join(cache_dir, sha)
    if os.path.exists(path):
        return path
    r = client.request("GET", "/api/v1/files/" + sha, token=token)
    if r.status != 200 or len(r.body) != size or hashlib.sha256(r.body).hexdigest() != sha:
        raise RuntimeError("file %s: HTTP %s, %d bytes" % (sha, r.status, len(r.body)))
    with open(path + ".part", "wb") as f:
        f.write(r.body)
    os.replace(path + ".part", path)
    return path


def train(args, client, token, task, manifest, cache_dir):
    folder = os.path.join(args.data_dir, "tasks", task["lease_id"])
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "manifest.json"), "w", encoding="utf-8") as f:
        f.write(task["manifest"])
    for entry in manifest["files"]:
        if entry["role"] in ("weights", "shard"):
            source = fetch(client, token, entry["sha256"], entry["size"], cache_dir)
            target = os.path.join(folder, entry["role"] + ".safetensors")
            if os.path.exists(target):
                os.unlink(target)
            os.link(source, target)
    # stdin stays open: its end would mean "checkpoint and stop" (docs/worker-protocol.md).
    worker = subprocess.Popen([args.worker, "--task", folder, "--threads", "1", "--checkpoint-interval", "0"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reported = False
    for line in worker.stdout:
        event = json.loads(line)
        if event.get("event") == "progress" and not reported:
            client.request("POST", "/api/v1/work/%s/progress" % task["lease_id"], token=token,
                           json_body={"step": event.get("step", 0), "of": event.get("of", 0),
                                      "loss": event.get("loss", 0.0)})
            reported = True
    worker.stdin.close()
    code = worker.wait()
    if code != 0:
        log(event="worker_failed", lease=task["lease_id"], code=code)
        return
    with open(os.path.join(folder, "result.safetensors"), "rb") as f:
        body = f.read()
    r = client.raw_put("/api/v1/work/%s/result" % task["lease_id"], body, token=token)
    log(event="uploaded", lease=task["lease_id"], status=r.status, job=manifest["job"]["id"],
        epoch=manifest["subtask"]["epoch"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--name", default="standin-" + platform.node())
    parser.add_argument("--max-retry-after", type=float, default=2.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, stop)
    url = urllib.parse.urlparse(args.url)
    client = Client(url.hostname, url.port, args.ca, timeout=30.0)
    cache_dir = os.path.join(args.data_dir, "cache")
    os.makedirs(cache_dir, exist_ok=True)

    enrolled = client.request("POST", "/api/v1/agents/enroll", json_body={
        "enrollment_token": args.token, "name": args.name, "platform": "linux-" + platform.machine(),
        "hardware": {"cores": os.cpu_count(), "gpu": "none", "ram_mb": 0}})
    if enrolled.status != 200:
        log(event="enroll_failed", status=enrolled.status, body=enrolled.body.decode(errors="replace"))
        return 1
    reply = enrolled.json()
    token = reply["agent_token"]
    key_path = os.path.join(args.data_dir, "signing-key.pub.pem")
    with open(key_path, "w", encoding="ascii") as f:
        f.write(reply["signing_public_key"])
    log(event="enrolled", agent=reply["agent_id"])

    while running:
        r = client.request("POST", "/api/v1/work/lease", token=token, json_body={
            "max_tasks": 1, "cached": sorted(os.listdir(cache_dir)),
            "capabilities": {"cores": os.cpu_count(), "gpu": False}})
        if r.status != 200:
            log(event="lease", status=r.status, tasks=0, error=r.body.decode(errors="replace"))
            if r.status in (401, 403):
                return 0  # revoked: a real agent would have to enroll again
            time.sleep(1)
            continue
        tasks = r.json().get("tasks", [])
        log(event="lease", status=200, tasks=len(tasks),
            jobs=[json.loads(t["manifest"])["job"]["id"] for t in tasks])
        if not tasks:
            time.sleep(min(float(r.json().get("retry_after", 10)), args.max_retry_after))
            continue
        for task in tasks:
            try:
                manifest = verify_manifest(task, key_path, args.data_dir)
            except ManifestError as e:
                log(event="manifest_refused", lease=task.get("lease_id"), error=str(e))
                continue
            train(args, client, token, task, manifest, cache_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
